/* A CUDA program with no CUDA toolkit: what scripts/device/instance-gpu.sh runs inside an
 * instance to prove its GPU computes. It loads the driver's libcuda.so.1 with dlopen (the
 * file builtin injection mounts), lists the devices it sees, JIT-compiles a PTX vector add,
 * checks every element on the host, then holds HOLD_MIB of device memory and keeps the GPU
 * busy for SPIN_SECONDS so the platform's GPU metrics can see the load.
 *
 *   cuda_check [SPIN_SECONDS [HOLD_MIB]]     (defaults 0 and 0)
 *
 * Prints "cuda_check: ok ..." and exits 0, or "cuda_check: FAILED ..." and exits 1.
 * Built by scripts/device/instance-gpu.sh (cc -O2 tools/cuda_check.c -ldl). C, so it runs in
 * any glibc image. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef unsigned long long CUdeviceptr;

/* c[i] = a[i] + b[i] for i < n; one thread an element. */
static const char* kPtx =
    ".version 6.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    ".visible .entry add(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n)\n"
    "{\n"
    "  .reg .pred p;\n"
    "  .reg .u32 i, n, ntid, ctaid, tid;\n"
    "  .reg .u64 pa, pb, pc, off;\n"
    "  .reg .f32 x, y, z;\n"
    "  ld.param.u64 pa, [a];\n"
    "  ld.param.u64 pb, [b];\n"
    "  ld.param.u64 pc, [c];\n"
    "  ld.param.u32 n, [n];\n"
    "  mov.u32 ntid, %ntid.x;\n"
    "  mov.u32 ctaid, %ctaid.x;\n"
    "  mov.u32 tid, %tid.x;\n"
    "  mad.lo.u32 i, ctaid, ntid, tid;\n"
    "  setp.ge.u32 p, i, n;\n"
    "  @p bra DONE;\n"
    "  mul.wide.u32 off, i, 4;\n"
    "  add.u64 pa, pa, off;\n"
    "  add.u64 pb, pb, off;\n"
    "  add.u64 pc, pc, off;\n"
    "  ld.global.f32 x, [pa];\n"
    "  ld.global.f32 y, [pb];\n"
    "  add.f32 z, x, y;\n"
    "  st.global.f32 [pc], z;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n"
    /* Spins until `cycles` of the SM clock have passed (NVML counts the time a kernel runs). */
    ".visible .entry spin(.param .u64 cycles)\n"
    "{\n"
    "  .reg .pred p;\n"
    "  .reg .u64 start, now, spent, limit;\n"
    "  ld.param.u64 limit, [cycles];\n"
    "  mov.u64 start, %clock64;\n"
    "LOOP:\n"
    "  mov.u64 now, %clock64;\n"
    "  sub.u64 spent, now, start;\n"
    "  setp.lt.u64 p, spent, limit;\n"
    "  @p bra LOOP;\n"
    "  ret;\n"
    "}\n";

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGetCount)(int*);
static CUresult (*cuDeviceGet)(CUdevice*, int);
static CUresult (*cuDeviceGetName)(char*, int, CUdevice);
static CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice);
static CUresult (*cuCtxCreate)(CUcontext*, unsigned, CUdevice);
static CUresult (*cuCtxSynchronize)(void);
static CUresult (*cuModuleLoadData)(CUmodule*, const void*);
static CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  void*, void**, void**);
static CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
static CUresult (*cuMemFree)(CUdeviceptr);
static CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
static CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
static CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);

static int failed(const char* what, CUresult rc) {
  printf("cuda_check: FAILED %s (CUresult %d)\n", what, rc);
  return 1;
}

#define LOAD(sym, name)                                               \
  do {                                                                \
    *(void**)(&sym) = dlsym(lib, name);                               \
    if (!sym) {                                                       \
      printf("cuda_check: FAILED libcuda.so.1 has no %s\n", name);   \
      return 1;                                                       \
    }                                                                 \
  } while (0)

int main(int argc, char** argv) {
  const double spin_seconds = argc > 1 ? atof(argv[1]) : 0;
  const size_t hold_mib = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 0;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("cuda_check: FAILED dlopen libcuda.so.1: %s\n", dlerror());
    return 1;
  }
  LOAD(cuInit, "cuInit");
  LOAD(cuDeviceGetCount, "cuDeviceGetCount");
  LOAD(cuDeviceGet, "cuDeviceGet");
  LOAD(cuDeviceGetName, "cuDeviceGetName");
  LOAD(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId");
  LOAD(cuCtxCreate, "cuCtxCreate_v2");
  LOAD(cuCtxSynchronize, "cuCtxSynchronize");
  LOAD(cuModuleLoadData, "cuModuleLoadData");
  LOAD(cuModuleGetFunction, "cuModuleGetFunction");
  LOAD(cuLaunchKernel, "cuLaunchKernel");
  LOAD(cuMemAlloc, "cuMemAlloc_v2");
  LOAD(cuMemFree, "cuMemFree_v2");
  LOAD(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  LOAD(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  LOAD(cuMemsetD8, "cuMemsetD8_v2");

  CUresult rc = cuInit(0);
  if (rc) return failed("cuInit", rc);
  int count = 0;
  if ((rc = cuDeviceGetCount(&count))) return failed("cuDeviceGetCount", rc);
  printf("cuda_check: %d device(s)\n", count);
  if (count < 1) return failed("no CUDA device visible", 0);
  for (int i = 0; i < count; ++i) {
    CUdevice d;
    char name[128] = "", bus[32] = "";
    cuDeviceGet(&d, i);
    cuDeviceGetName(name, sizeof name, d);
    cuDeviceGetPCIBusId(bus, sizeof bus, d);
    printf("cuda_check: device %d: %s at %s\n", i, name, bus);
  }
  CUdevice dev;
  CUcontext ctx;
  if ((rc = cuDeviceGet(&dev, 0))) return failed("cuDeviceGet", rc);
  if ((rc = cuCtxCreate(&ctx, 0, dev))) return failed("cuCtxCreate", rc);
  CUmodule module;
  if ((rc = cuModuleLoadData(&module, kPtx))) return failed("cuModuleLoadData (PTX JIT)", rc);
  CUfunction add, spin;
  if ((rc = cuModuleGetFunction(&add, module, "add"))) return failed("cuModuleGetFunction add", rc);
  if ((rc = cuModuleGetFunction(&spin, module, "spin"))) return failed("cuModuleGetFunction spin", rc);

  const unsigned n = 1u << 20;
  const size_t bytes = (size_t)n * sizeof(float);
  float* a = malloc(bytes);
  float* b = malloc(bytes);
  float* c = malloc(bytes);
  if (!a || !b || !c) return failed("host malloc", 0);
  for (unsigned i = 0; i < n; ++i) {
    a[i] = (float)i;
    b[i] = 2.0f * (float)i + 1.0f;
  }
  CUdeviceptr da, db, dc;
  if ((rc = cuMemAlloc(&da, bytes)) || (rc = cuMemAlloc(&db, bytes)) || (rc = cuMemAlloc(&dc, bytes)))
    return failed("cuMemAlloc", rc);
  if ((rc = cuMemcpyHtoD(da, a, bytes)) || (rc = cuMemcpyHtoD(db, b, bytes))) return failed("cuMemcpyHtoD", rc);
  void* params[] = {&da, &db, &dc, (void*)&n};
  if ((rc = cuLaunchKernel(add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL)))
    return failed("cuLaunchKernel add", rc);
  if ((rc = cuCtxSynchronize())) return failed("cuCtxSynchronize", rc);
  if ((rc = cuMemcpyDtoH(c, dc, bytes))) return failed("cuMemcpyDtoH", rc);
  for (unsigned i = 0; i < n; ++i) {
    if (c[i] != 3.0f * (float)i + 1.0f) {
      printf("cuda_check: FAILED element %u is %f, not %f\n", i, c[i], 3.0f * (float)i + 1.0f);
      return 1;
    }
  }
  printf("cuda_check: vector add of %u floats on the GPU: every element right\n", n);

  if (spin_seconds > 0) {
    CUdeviceptr hold = 0;
    if (hold_mib > 0) {
      if ((rc = cuMemAlloc(&hold, hold_mib << 20))) return failed("cuMemAlloc (hold)", rc);
      if ((rc = cuMemsetD8(hold, 1, hold_mib << 20))) return failed("cuMemsetD8 (hold)", rc);
    }
    printf("cuda_check: holding %zu MiB and keeping the GPU busy for %.0f s\n", hold_mib, spin_seconds);
    fflush(stdout);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* Kernels of ~0.2 s each (at up to 2 GHz) until the time is up. */
    unsigned long long cycles = 400000000ULL;
    void* sp[] = {&cycles};
    for (;;) {
      clock_gettime(CLOCK_MONOTONIC, &t);
      if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 >= spin_seconds) break;
      if ((rc = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, sp, NULL))) return failed("cuLaunchKernel spin", rc);
      if ((rc = cuCtxSynchronize())) return failed("cuCtxSynchronize (spin)", rc);
    }
    if (hold) cuMemFree(hold);
  }
  cuMemFree(da);
  cuMemFree(db);
  cuMemFree(dc);
  printf("cuda_check: ok\n");
  return 0;
}
