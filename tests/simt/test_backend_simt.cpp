// The device tests' backend in the unit-labelled binaries: the host SIMT emulation.
#include "tests/simt/backend_simt.h"
#include "tests/simt/test_backend.h"

namespace megatrain::test {

std::unique_ptr<DeviceBackend> make_test_backend() { return make_simt_backend(); }

}  // namespace megatrain::test
