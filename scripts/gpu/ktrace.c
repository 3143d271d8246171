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
// With KTRACE_SAMPLES=FILE it also samples the host: every
// KTRACE_SAMPLE_US microseconds (default 100) of a thread's own CPU time
// that thread records its program counter and call stack (as far as C's
// unwinder goes: into Go code it stops at the first Go frame), with a
// timestamp, into FILE, and the process's mappings into FILE.maps, for
// scripts/gpu/hsamples.py to resolve against the same binaries. The
// kernel checks CPU timers at its clock tick, so a busy thread is sampled
// a few hundred times a second whatever the period; each sample carries
// its weight, the periods it stands for. Set alone (without KTRACE_OUT) it
// records no device activity, which leaves the host's own timing alone.
// A process that never starts CUDA (our CPU build) takes the library
// through LD_PRELOAD, with KTRACE_SAMPLE_AFTER_MS=N to start the sampler
// N milliseconds after it loads (300 is past a Go runtime's start).
//
//   S time tid weight pc n frame...   a sample (time in CLOCK_MONOTONIC
//                                     ns, pc and frames in hex)
//
// Build (CUPTI's and CUDA's headers; the CUPTI library of the driver's
// CUDA version):
//
//   gcc -O2 -shared -fPIC -o libktrace.so scripts/gpu/ktrace.c -I CUPTI_INC -I CUDA_INC -L CUPTI_LIB -lcupti
#define _GNU_SOURCE
#include <cupti.h>
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

static void sleep_ms(long ms) {
	const struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&t, NULL);
}

static void *flusher(void *arg) {
	for (;;) {
		sleep_ms((long)(intptr_t)arg);
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

// The host sampler (KTRACE_SAMPLES). Each thread has a timer on its own
// CPU clock that signals that thread; the handler writes a slot of a ring
// that a writer thread empties into the file every 100 ms (the ring holds
// far more than a period's samples).
#define SAMPLE_DEPTH 40
#define SAMPLE_SLOTS (1u << 16)
#define MAX_THREADS 8192

struct sample {
	atomic_int ready;
	int tid, n, weight;
	unsigned long long ns;
	void *pc;
	void *frames[SAMPLE_DEPTH];
};

static struct sample *ring;
static atomic_uint taken;
static int sample_signal;

static void on_sample(int sig, siginfo_t *info, void *context) {
	(void)sig;
	const int saved = errno;
	struct sample *s = &ring[atomic_fetch_add(&taken, 1) % SAMPLE_SLOTS];
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	s->ns = (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec;
	s->tid = (int)syscall(SYS_gettid);
	s->weight = 1 + info->si_overrun;
	s->pc = (void *)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
	s->n = backtrace(s->frames, SAMPLE_DEPTH);
	atomic_store_explicit(&s->ready, 1, memory_order_release);
	errno = saved;
}

// arm starts a timer on thread tid's CPU clock (the kernel's encoding of a
// thread's clock: its id, inverted, shifted past the clock-kind bits).
static void arm(int tid, long us) {
	struct sigevent ev;
	memset(&ev, 0, sizeof ev);
	ev.sigev_notify = SIGEV_THREAD_ID;
	ev.sigev_signo = sample_signal;
	ev._sigev_un._tid = tid;
	const clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 6u);
	timer_t t;
	if (timer_create(clock, &ev, &t) != 0) {
		return;
	}
	const struct itimerspec every = {{us / 1000000, (us % 1000000) * 1000}, {us / 1000000, (us % 1000000) * 1000}};
	timer_settime(t, 0, &every, NULL);
}

static void write_maps(const char *path) {
	char name[4096];
	snprintf(name, sizeof name, "%s.maps", path);
	FILE *in = fopen("/proc/self/maps", "r"), *to = fopen(name, "w");
	if (in && to) {
		char line[8192];
		while (fgets(line, sizeof line, in)) {
			fputs(line, to);
		}
	}
	if (in) {
		fclose(in);
	}
	if (to) {
		fclose(to);
	}
}

static void *sampler(void *arg) {
	const char *path = arg;
	const char *every = getenv("KTRACE_SAMPLE_US");
	const long us = every && atol(every) > 0 ? atol(every) : 100;
	FILE *to = fopen(path, "w");
	if (!to) {
		return NULL;
	}
	static int armed[MAX_THREADS];
	int narmed = 0;
	const int self = (int)syscall(SYS_gettid);
	unsigned written = 0;
	for (int round = 0;; round++) {
		DIR *d = opendir("/proc/self/task");
		for (struct dirent *e; d && (e = readdir(d));) {
			const int tid = atoi(e->d_name);
			int seen = tid <= 0 || tid == self;
			for (int j = 0; j < narmed && !seen; j++) {
				seen = armed[j] == tid;
			}
			if (!seen && narmed < MAX_THREADS) {
				armed[narmed++] = tid;
				arm(tid, us);
			}
		}
		if (d) {
			closedir(d);
		}
		const unsigned upto = atomic_load(&taken);
		if (upto - written > SAMPLE_SLOTS) {
			fprintf(to, "E lost %u samples\n", upto - written - SAMPLE_SLOTS);
			written = upto - SAMPLE_SLOTS;
		}
		for (; written != upto; written++) {
			struct sample *s = &ring[written % SAMPLE_SLOTS];
			if (!atomic_load_explicit(&s->ready, memory_order_acquire)) {
				break; // a handler is still writing it: next round
			}
			fprintf(to, "S %llx %d %d %lx %d", s->ns, s->tid, s->weight, (unsigned long)s->pc, s->n);
			for (int j = 0; j < s->n; j++) {
				fprintf(to, " %lx", (unsigned long)s->frames[j]);
			}
			fputc('\n', to);
			atomic_store_explicit(&s->ready, 0, memory_order_relaxed);
		}
		fflush(to);
		if (round % 10 == 0) {
			write_maps(path);
		}
		sleep_ms(100);
	}
	return NULL;
}

// start_sampler starts the host sampler once, whichever way the library
// was loaded (a preloaded process may start CUDA too).
static void start_sampler(const char *path) {
	static atomic_flag started = ATOMIC_FLAG_INIT;
	if (atomic_flag_test_and_set(&started)) {
		return;
	}
	ring = calloc(SAMPLE_SLOTS, sizeof *ring);
	if (!ring) {
		return;
	}
	void *warm[4];
	backtrace(warm, 4); // loads the unwinder now, not inside a handler
	sample_signal = SIGRTMIN + 5;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sample;
	sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sample_signal, &sa, NULL) != 0) {
		return;
	}
	write_maps(path);
	pthread_t t;
	if (pthread_create(&t, NULL, sampler, (void *)path) == 0) {
		pthread_detach(t);
	}
}

static void *start_later(void *arg) {
	sleep_ms((long)(intptr_t)arg);
	start_sampler(getenv("KTRACE_SAMPLES"));
	return NULL;
}

// Loaded with LD_PRELOAD instead (a process that never starts CUDA, such
// as our CPU build), KTRACE_SAMPLE_AFTER_MS=N starts the host sampler N
// milliseconds after the library loads: after a Go program's runtime has
// set its own signal handlers, which would otherwise replace the
// sampler's.
__attribute__((constructor)) static void preloaded(void) {
	const char *after = getenv("KTRACE_SAMPLE_AFTER_MS"), *samples = getenv("KTRACE_SAMPLES");
	pthread_t t;
	if (after && samples && *samples &&
	    pthread_create(&t, NULL, start_later, (void *)(intptr_t)atol(after)) == 0) {
		pthread_detach(t);
	}
}

// Called by the CUDA driver when it loads the library (CUDA_INJECTION64_PATH).
int InitializeInjection(void) {
	const char *samples = getenv("KTRACE_SAMPLES");
	if (samples && *samples) {
		start_sampler(samples);
	}
	const char *path = getenv("KTRACE_OUT");
	if (samples && *samples && !path) {
		return 1;
	}
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
