// A stand-in for a CUDA device in a torch that has none (a CPU-only build, or a CUDA build that sees no GPU), so
// that fake tensors on "cuda" run forward, backward and optimizer steps (alloctune/dryrun/native.py builds and loads
// it). Two things in torch's C++ ask for a device: the device guard of CUDA (a CPU-only build has none: `.to("cuda")`
// fails with "PyTorch is not linked with support for cuda devices"), and the accelerator the autograd engine syncs
// streams on (`at::getAccelerator`, which asks the CUDA hooks `hasCUDA()`: without a device, `loss.backward()` fails
// with "Cannot access accelerator device when none is available"). Both are given no-op answers here; nothing runs
// on a device.
#include <new>

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/FakeGuardImpl.h>

namespace {

struct FakeCUDAHooks final : at::CUDAHooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex) const override {}
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex) const override { return 0; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return 0; }
  bool hasCUDA() const override { return true; }
  c10::DeviceIndex current_device() const override { return 0; }
  int getNumGPUs() const override { return 1; }
  void deviceSynchronize(c10::DeviceIndex) const override {}
};

c10::impl::FakeGuardImpl<c10::DeviceType::CUDA> fake_guard;

}  // namespace

extern "C" int alloctune_fake_cuda() {
  // The hooks object torch already made is replaced in place by ours: both are the interface's vtable alone.
  static_assert(sizeof(FakeCUDAHooks) == sizeof(at::CUDAHooksInterface), "the hooks hold no state");
  auto& hooks = const_cast<at::CUDAHooksInterface&>(at::detail::getCUDAHooks());
  new (&hooks) FakeCUDAHooks();
  c10::impl::registerDeviceGuard(c10::DeviceType::CUDA, &fake_guard);
  return 1;
}
