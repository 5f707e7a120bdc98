/*
 * A small fake of NVIDIA's NVML library (libnvidia-ml.so), for testing
 * rankscope's NVML sampler through the real nvml-wrapper code path on a
 * machine without a GPU. It implements only the functions rankscope calls.
 *
 * Behaviour, read from the environment at nvmlInit:
 *   FAKE_NVML_DEVICES      number of devices (default 2, at most 16)
 *   FAKE_NVML_LOST_DEVICE  index of a device that falls off the bus ...
 *   FAKE_NVML_LOST_AFTER   ... after this many utilisation reads (default 3)
 *   FAKE_NVML_HOT_DEVICE   index of a device that reports thermal throttling
 *   FAKE_NVML_HANG_AFTER   utilisation reads after which the next one never
 *                          returns (a wedged driver) ...
 *   FAKE_NVML_HANG_MARK    ... having created this file, where it is set
 * Device 1 answers NotSupported for power usage, always.
 * NVML indices run in the reverse of PCI bus order, so code that assumes
 * CUDA and NVML indices agree picks the wrong device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_GPU_IS_LOST = 15,
};

#define MAX_DEVICES 16
#define MIB (1024ULL * 1024ULL)

struct device {
    unsigned index;
    unsigned long long calls;
};
typedef struct device *nvmlDevice_t;

typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

static struct device devices[MAX_DEVICES];
static unsigned device_count;
static int initialized;
static int lost_device = -1;
static unsigned long long lost_after = 3;
static int hot_device = -1;
static long long hang_after = -1;

static int env_int(const char *name, int fallback) {
    const char *value = getenv(name);
    return value ? atoi(value) : fallback;
}

static nvmlReturn_t init(void) {
    device_count = (unsigned)env_int("FAKE_NVML_DEVICES", 2);
    if (device_count > MAX_DEVICES) device_count = MAX_DEVICES;
    lost_device = env_int("FAKE_NVML_LOST_DEVICE", -1);
    lost_after = (unsigned long long)env_int("FAKE_NVML_LOST_AFTER", 3);
    hot_device = env_int("FAKE_NVML_HOT_DEVICE", -1);
    hang_after = env_int("FAKE_NVML_HANG_AFTER", -1);
    for (unsigned i = 0; i < device_count; i++) {
        devices[i].index = i;
        devices[i].calls = 0;
    }
    initialized = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned flags) { (void)flags; return init(); }
nvmlReturn_t nvmlShutdown(void) { initialized = 0; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    *count = device_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (index >= device_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

static int is_lost(nvmlDevice_t d) {
    return (int)d->index == lost_device && d->calls >= lost_after;
}

#define CHECK(d)                                          \
    do {                                                  \
        if (!initialized) return NVML_ERROR_UNINITIALIZED; \
        if (!(d)) return NVML_ERROR_INVALID_ARGUMENT;     \
        if (is_lost(d)) return NVML_ERROR_GPU_IS_LOST;    \
    } while (0)

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned length) {
    CHECK(d);
    snprintf(name, length, "Fake GPU %u", d->index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned length) {
    CHECK(d);
    snprintf(uuid, length, "GPU-fa4e%04u-0000-4000-8000-00000000%04u", d->index, d->index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    CHECK(d);
    memset(pci, 0, sizeof *pci);
    pci->bus = 0x10 * (device_count - d->index); /* reverse of NVML order */
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
    pci->pciDeviceId = 0x233010de;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *memory) {
    CHECK(d);
    memory->total = 80ULL * 1024 * MIB;
    memory->reserved = 512 * MIB;
    memory->used = (1024 + 100 * (d->calls % 50)) * MIB;
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *util) {
    CHECK(d);
    if (hang_after >= 0 && d->calls >= (unsigned long long)hang_after) {
        const char *mark = getenv("FAKE_NVML_HANG_MARK");
        FILE *marked = mark ? fopen(mark, "w") : NULL;
        if (marked) fclose(marked);
        for (;;) pause();
    }
    d->calls++;
    util->gpu = 50 + (unsigned)(d->calls % 40);
    util->memory = 20 + (unsigned)(d->calls % 10);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *temp) {
    CHECK(d);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = (int)d->index == hot_device ? 89 : 60 + d->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *milliwatts) {
    CHECK(d);
    if (d->index == 1) return NVML_ERROR_NOT_SUPPORTED;
    *milliwatts = 250000 + 1000 * d->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned *milliwatts) {
    CHECK(d);
    *milliwatts = 700000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *mhz) {
    CHECK(d);
    if (type == 1) *mhz = (int)d->index == hot_device ? 1410 : 1980; /* SM */
    else if (type == 2) *mhz = 2619;                                  /* memory */
    else *mhz = 1980;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned *mhz) {
    CHECK(d);
    *mhz = type == 2 ? 2619 : 1980;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons) {
    CHECK(d);
    *reasons = (int)d->index == hot_device ? 0x20 | 0x40 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned *kbps) {
    CHECK(d);
    *kbps = counter == 0 ? 1000 + d->index : 2000 + d->index;
    return NVML_SUCCESS;
}

/* The count-then-fill protocol: with too small a buffer, the count needed
 * comes back with NVML_ERROR_INSUFFICIENT_SIZE. This process and pid 1 run
 * on every device. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count,
                                                      nvmlProcessInfo_t *infos) {
    CHECK(d);
    const unsigned needed = 2;
    if (infos == NULL || *count < needed) {
        *count = needed;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memset(infos, 0, needed * sizeof *infos);
    infos[0].pid = (unsigned)getpid();
    infos[0].usedGpuMemory = 512 * MIB;
    infos[1].pid = 1;
    infos[1].usedGpuMemory = 256 * MIB;
    *count = needed;
    return NVML_SUCCESS;
}
