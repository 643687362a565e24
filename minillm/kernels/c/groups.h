/* A prompt's many rows (from AMX_FROM_ROWS) on the vector units, for the formats whose weights
   are integers (int8, Q4_1): a group of VW weight rows is packed once per call, a vector's lanes
   across the group's rows, then every row of x goes by it, a few rows a pass. groups_run
   shares the groups between the threads, each with its own packing space; each format gives
   the function that packs a group and multiplies by it. */
#ifndef MINILLM_GROUPS_H
#define MINILLM_GROUPS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simd.h"

#define GROUP_ROWS VW  /* weight rows a packed group: a vector's lanes */

struct groups_job {
    const void *operands;  /* what group reads and writes: the format's own struct */
    int64_t N, n0;         /* the weight rows n0 .. N (n0 a group's start) */
    size_t space_bytes;    /* a group once packed, and whatever the format keeps beside it */
    /* weight rows n .. n + rows (rows <= GROUP_ROWS) packed into space (the lanes past them
       zero), then every row of x times them, into the output */
    void (*group)(const void *operands, int64_t n, int64_t rows, char *space);
};

/* out's first `count` values from y's lanes */
static inline void store_lanes(float *out, vf y, int64_t count) {
    if (count == GROUP_ROWS) {
        vstore(out, y);
        return;
    }
    float lanes[GROUP_ROWS];
    vstore(lanes, y);
    memcpy(out, lanes, (size_t)count * sizeof(float));
}

/* every group, shared between the threads; -1 if a thread cannot allocate its space */
static inline int groups_run(const struct groups_job *job, int threads) {
    int64_t groups = (job->N - job->n0 + GROUP_ROWS - 1) / GROUP_ROWS;
    int failed = 0;
    #pragma omp parallel num_threads(threads) if (threads > 1 && groups > 1)
    {
        char *space = (char *)aligned_alloc(64, (job->space_bytes + 63) / 64 * 64);
        if (!space) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(static)
        for (int64_t g = 0; g < groups; g++) {
            if (!space)
                continue;
            int64_t n = job->n0 + GROUP_ROWS * g;
            job->group(job->operands, n, job->N - n < GROUP_ROWS ? job->N - n : GROUP_ROWS,
                       space);
        }
        free(space);
    }
    return failed ? -1 : 0;
}

#endif
