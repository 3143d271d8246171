// ktrace: a CUDA injection library that records, through CUPTI's activity
// API, every kernel, memory copy and CUDA driver and runtime call of the
// process it is loaded into, with device timestamps, and writes them to the
// file named by KTRACE_OUT when the process exits. Loaded by the driver
// itself:
//
//   CUDA_INJECTION64_PATH=/tmp/libktrace.so KTRACE_OUT=trace.txt PROGRAM ...
//
// One line a record, fields separated by single spaces:
//
//   K start end stream name    a kernel (name as compiled, mangled)
//   M start end kind bytes     a memory copy (CUPTI's copy kind number)
//   D start end thread name    a driver call, on the calling host thread
//   R start end thread name    a runtime call (the driver calls inside
//                              it are not recorded apart)
//
// Times are CUPTI's nanoseconds, one clock for the device and the host
// calls. scripts/gpu/ksteps.py cuts a trace into decode steps.
//
// A Go program leaves through the exit system call, past C's exit
// handlers, so a thread of the library hands CUPTI's records to the file
// every KTRACE_FLUSH_MS milliseconds (default 200) as well as at a C exit:
// what ran in the last such period of a Go program is not written.
//
// Build (CUPTI's and CUDA's headers; the CUPTI library of the driver's
// CUDA version):
//
//   gcc -O2 -shared -fPIC -o libktrace.so scripts/gpu/ktrace.c -I CUPTI_INC -I CUDA_INC -L CUPTI_LIB -lcupti
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BUFFER_BYTES (16u << 20)

static FILE *out;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records) {
	*buffer = aligned_alloc(8, BUFFER_BYTES);
	*size = *buffer ? BUFFER_BYTES : 0;
	*max_records = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
	(void)ctx;
	(void)stream;
	(void)size;
	CUpti_Activity *r = NULL;
	pthread_mutex_lock(&mu);
	while (out && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
		switch (r->kind) {
		case CUPTI_ACTIVITY_KIND_KERNEL:
		case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
			const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
			if (k->start == 0 || k->end < k->start) {
				break; // still running when a forced flush took it
			}
			fprintf(out, "K %llu %llu %u %s\n", (unsigned long long)k->start, (unsigned long long)k->end,
			        k->streamId, k->name ? k->name : "?");
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMCPY: {
			const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
			fprintf(out, "M %llu %llu %u %llu\n", (unsigned long long)m->start, (unsigned long long)m->end,
			        (unsigned)m->copyKind, (unsigned long long)m->bytes);
			break;
		}
		case CUPTI_ACTIVITY_KIND_DRIVER:
		case CUPTI_ACTIVITY_KIND_RUNTIME: {
			const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)r;
			const int driver = r->kind == CUPTI_ACTIVITY_KIND_DRIVER;
			const char *name = "?";
			cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
			fprintf(out, "%c %llu %llu %u %s\n", driver ? 'D' : 'R', (unsigned long long)a->start,
			        (unsigned long long)a->end, a->threadId, name);
			break;
		}
		default:
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	free(buffer);
}

static void *flusher(void *arg) {
	const long ms = (long)(intptr_t)arg;
	const struct timespec period = {ms / 1000, (ms % 1000) * 1000000L};
	for (;;) {
		nanosleep(&period, NULL);
		cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		pthread_mutex_lock(&mu);
		if (out) {
			fflush(out);
		}
		pthread_mutex_unlock(&mu);
	}
	return NULL;
}

static void finish(void) {
	cuptiActivityFlushAll(1);
	pthread_mutex_lock(&mu);
	if (out) {
		fclose(out);
		out = NULL;
	}
	pthread_mutex_unlock(&mu);
}

// Called by the CUDA driver when it loads the library (CUDA_INJECTION64_PATH).
int InitializeInjection(void) {
	const char *path = getenv("KTRACE_OUT");
	out = fopen(path ? path : "ktrace.txt", "w");
	if (!out) {
		return 0;
	}
	if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
	    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
	    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
	    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) != CUPTI_SUCCESS ||
	    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS) {
		fprintf(out, "E cupti could not be enabled\n");
		fclose(out);
		out = NULL;
		return 0;
	}
	atexit(finish);
	const char *every = getenv("KTRACE_FLUSH_MS");
	long ms = every ? atol(every) : 200;
	pthread_t t;
	if (pthread_create(&t, NULL, flusher, (void *)(intptr_t)(ms > 0 ? ms : 200)) == 0) {
		pthread_detach(t);
	}
	return 1;
}
