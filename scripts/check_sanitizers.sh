#!/usr/bin/env bash
# Builds megatrain and its tests with AddressSanitizer + UndefinedBehaviorSanitizer into its own
# folder (default build-asan) and runs ctest there. -fno-sanitize-recover=all makes undefined
# behaviour abort the test instead of printing and passing; leaks fail it too, except Open MPI's own
# (scripts/sanitizers/lsan-openmpi.supp). Run it after changing memory handling or threading.
#   bash scripts/check_sanitizers.sh [CTEST_ARGS...]     e.g. -R Zero
# Needs what scripts/setup.sh installs (and its build/pyref venv for the reference tests).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${SANITIZER_BUILD_DIR:-build-asan}
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# gtest_discover_tests runs each test binary at build time, where Open MPI's leaks would fail it.
export ASAN_OPTIONS=detect_leaks=0
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGATRAIN_BENCH=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DMEGATRAIN_REF_PYTHON="$PWD/build/pyref/bin/python3"
cmake --build "$dir" -j "$(nproc)"
# Open MPI unloads its plugins in MPI_Finalize, before LeakSanitizer runs at exit, and allocates
# through glibc's asprintf, where the fast unwinder loses the caller: either way no suppression could
# name the library. scripts/sanitizers/preload.c (dlclose a no-op, asprintf with frame pointers) is
# preloaded into every process ctest starts, ahead of the ASan runtime (verify_asan_link_order=0).
${CC:-cc} -shared -fPIC -O2 -fno-omit-frame-pointer -o "$dir/preload.so" scripts/sanitizers/preload.c
preload=$(cd "$dir" && pwd)/preload.so
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:verify_asan_link_order=0
export LSAN_OPTIONS="suppressions=$PWD/scripts/sanitizers/lsan-openmpi.supp:print_suppressions=0"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
LD_PRELOAD="$preload${LD_PRELOAD:+ $LD_PRELOAD}" ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" "$@"
