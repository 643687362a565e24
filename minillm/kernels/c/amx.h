/* What the AMX kernels share: Linux's permission to use the tiles, the tile configuration, and
   the driver that packs the weights a slice at a time and runs the tiles over them (amx_run);
   and, at every level, the row count from which a prompt takes the tiles' way. */
#ifndef MINILLM_AMX_H
#define MINILLM_AMX_H

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

/* rows of x from which an int8 or Q4_1 prompt goes to the tiles (16 rows is one tile; bf16's
   threshold is matmul_bf16.c's BF16_AMX_FROM_ROWS), and from which, on a CPU without them, it
   goes to groups of weight rows on the vector units (Q4_1's in the tiles' order) */
#define AMX_FROM_ROWS 16

#ifdef __AMX_TILE__
#include <sys/syscall.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

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

/* every tile register 16 rows of 64 bytes (the bf16 and int8 multiplies) */
static const struct tile_config AMX_16_ROWS_OF_64 = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

/* One multiply on the tiles, in its format's terms: x's rows 0 .. M, laid out for the tiles
   and padded to a whole tile (16 rows), times weight rows 0 .. 32 groups. */
struct amx_job {
    const void *operands;  /* what pack and tile read and write: the format's own struct */
    int64_t M, groups;
    int64_t half_bytes;  /* 16 weight rows once packed */
    const struct tile_config *config;
    /* weight rows 16 half .. 16 half + 16 in the tiles' layout, into `out` (half_bytes) */
    void (*pack)(const void *operands, int64_t half, char *out);
    /* x's rows m .. m + rows (rows <= rows_per_tile) times group g's 32 packed weight rows (its two
       halves, half_bytes apart, at `packed`), into their place in the output */
    void (*tile)(const void *operands, int64_t m, int64_t rows, int64_t g, const char *packed);
    int64_t rows_per_tile;  /* x's rows each call of tile takes at most: 32, else 16 */
};

/* The driver every AMX multiply shares: each thread packs a slice of weight groups (sized for
   L2) into its own space, then every tile of x's rows passes over it. 0, or -1 when it cannot
   allocate the threads' space (nothing written). */
static inline int amx_run(const struct amx_job *job, int threads) {
    const int64_t step = job->rows_per_tile == 32 ? 32 : 16;
    int64_t slice = amx_groups_per_slice(job->groups, 2 * job->half_bytes, threads);
    size_t per_thread = ((size_t)(2 * slice * job->half_bytes) + 63) / 64 * 64;
    char *space = (char *)aligned_alloc(64, (size_t)threads * per_thread);
    if (!space)
        return -1;
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        _tile_loadconfig(job->config);
        char *mine = space;
#ifdef _OPENMP
        mine += (size_t)omp_get_thread_num() * per_thread;
#endif
        #pragma omp for schedule(static)
        for (int64_t g0 = 0; g0 < job->groups; g0 += slice) {
            int64_t count = job->groups - g0 < slice ? job->groups - g0 : slice;
            for (int64_t h = 0; h < 2 * count; h++)
                job->pack(job->operands, 2 * g0 + h, mine + h * job->half_bytes);
            for (int64_t m = 0; m < job->M; m += step)
                for (int64_t g = 0; g < count; g++)
                    job->tile(job->operands, m, job->M - m < step ? job->M - m : step, g0 + g,
                              mine + 2 * g * job->half_bytes);
        }
        _tile_release();
    }
    free(space);
    return 0;
}
#endif  /* __AMX_TILE__ */

#endif
