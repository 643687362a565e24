/* What the AMX kernels share: Linux's permission to use the tiles, and the tile configuration. */
#ifndef MINILLM_AMX_H
#define MINILLM_AMX_H

#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
/* rows of x from which a prompt goes to the tiles (16 rows is one tile) */
#define AMX_FROM_ROWS 16

struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* 1 where Linux lets this process use the tiles (asked once per file that includes this) */
static int amx_state;  /* 0: not asked yet, 1: granted, -1: refused */
static inline int amx_granted(void) {
    if (amx_state == 0)
        amx_state = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 1 : -1;
    return amx_state == 1;
}

/* bytes of packed weights one slice holds: it stays in L2 while x's rows pass */
#define AMX_SLICE_BYTES (1 << 18)

/* groups of 32 weight rows in each slice, `group_bytes` each once packed: at most a slice's
   bytes (at least one group), and as many slices for each of the threads */
static inline int64_t amx_groups_per_slice(int64_t groups, int64_t group_bytes, int threads) {
    int64_t most = AMX_SLICE_BYTES / group_bytes;
    most = most < 1 ? 1 : most;
    int64_t slices = threads * ((groups + threads * most - 1) / (threads * most));
    return (groups + slices - 1) / slices;
}

/* every tile register 16 rows of 64 bytes */
static inline void amx_configure(void) {
    struct tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    for (int t = 0; t < 8; t++)
        config.colsb[t] = 64, config.rows[t] = 16;
    _tile_loadconfig(&config);
}

#endif
