# sgemm_libs: the same GEMM benchmark built against three BLAS libraries (see bench/RESULTS.md).
# Included from bench/CMakeLists.txt. Each library is looked up in its Debian OpenMP-build
# directory; a missing one only skips its target. The libraries' sonames (libopenblas.so.0,
# libblis.so.4) are also provided by Debian's alternatives (pthread OpenBLAS by default), so the
# targets get an explicit RPATH to the OpenMP directory to load exactly the library they were
# linked against.
set(_mt_multiarch "${CMAKE_LIBRARY_ARCHITECTURE}")
if(NOT _mt_multiarch)
  set(_mt_multiarch x86_64-linux-gnu)
endif()

# mt_sgemm_bench(TARGET MACRO INCLUDE_DIR LIBRARY)
function(mt_sgemm_bench target macro incdir lib)
  add_executable(${target} ${CMAKE_CURRENT_LIST_DIR}/sgemm_libs.cpp)
  target_compile_features(${target} PRIVATE cxx_std_20)
  target_compile_definitions(${target} PRIVATE ${macro})
  target_compile_options(${target} PRIVATE -O3 -march=native)
  if(incdir)
    target_include_directories(${target} SYSTEM PRIVATE ${incdir})
  endif()
  target_link_libraries(${target} PRIVATE ${lib})
  get_filename_component(_libdir "${lib}" DIRECTORY)
  if(NOT _libdir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set_target_properties(${target} PROPERTIES BUILD_RPATH "${_libdir}" INSTALL_RPATH "${_libdir}")
  endif()
endfunction()

# OpenBLAS, OpenMP build (the top-level CMakeLists.txt may already have found it).
if(NOT MT_BLAS_LIB)
  find_library(MT_BLAS_LIB NAMES openblas PATHS /usr/lib/${_mt_multiarch}/openblas-openmp NO_DEFAULT_PATH)
endif()
if(NOT MT_CBLAS_INCLUDE)
  find_path(MT_CBLAS_INCLUDE NAMES cblas.h PATHS /usr/include/${_mt_multiarch}/openblas-openmp NO_DEFAULT_PATH)
endif()
if(MT_BLAS_LIB AND MT_CBLAS_INCLUDE)
  mt_sgemm_bench(sgemm_openblas MT_BLAS_OPENBLAS "${MT_CBLAS_INCLUDE}" "${MT_BLAS_LIB}")
else()
  message(STATUS "sgemm_openblas skipped: install libopenblas-openmp-dev")
endif()

# BLIS, OpenMP build (package libblis-openmp-dev, pulled in by libblis-dev).
find_library(MT_BLIS_LIB NAMES blis PATHS /usr/lib/${_mt_multiarch}/blis-openmp NO_DEFAULT_PATH)
find_path(MT_BLIS_INCLUDE NAMES cblas.h PATHS /usr/include/${_mt_multiarch}/blis-openmp NO_DEFAULT_PATH)
if(MT_BLIS_LIB AND MT_BLIS_INCLUDE)
  mt_sgemm_bench(sgemm_blis MT_BLAS_BLIS "${MT_BLIS_INCLUDE}" "${MT_BLIS_LIB}")
else()
  message(STATUS "sgemm_blis skipped: install libblis-dev")
endif()

# oneDNN (dnnl_sgemm; Debian's build uses the OpenMP runtime).
find_library(MT_DNNL_LIB NAMES dnnl)
find_path(MT_DNNL_INCLUDE NAMES dnnl.h)
if(MT_DNNL_LIB AND MT_DNNL_INCLUDE)
  mt_sgemm_bench(sgemm_dnnl MT_BLAS_DNNL "${MT_DNNL_INCLUDE}" "${MT_DNNL_LIB}")
else()
  message(STATUS "sgemm_dnnl skipped: install libdnnl-dev")
endif()
