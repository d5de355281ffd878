# Read by ctest after the discovered tests (TEST_INCLUDE_FILES): the e2e tests that take over a
# minute on 2 cores get the label `slow` too (ctest -LE slow leaves them out of a quick run).
foreach(t PpE2E.EveryLayoutOfEightRanksMatchesOneProcess PpE2E.EveryLayoutOfFourRanksMatchesOneProcess
          MoeE2E.EveryLayoutTrainsLikeOneProcess ResilientE2E.AChaosSoakEndsWithTheFaultFreeWeights)
  set_tests_properties(${t} PROPERTIES LABELS "e2e;slow")
endforeach()
