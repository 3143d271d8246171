package mlx

/*
#include <signal.h>
#include <string.h>

// The GPU backend's libraries install handlers for termination signals
// when they initialize, without SA_ONSTACK; the Go runtime then aborts the
// process on the first SIGTERM instead of delivering it to signal.Notify.
// The handlers Go installed at start are saved before any of that and put
// back afterwards.
static const int provider_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGUSR1, SIGUSR2};
enum { provider_nsignals = sizeof(provider_signals) / sizeof(provider_signals[0]) };
static struct sigaction provider_saved[provider_nsignals];

static void provider_signals_save(void) {
	for (int i = 0; i < provider_nsignals; i++) {
		sigaction(provider_signals[i], NULL, &provider_saved[i]);
	}
}

static int provider_signals_restore(void) {
	int restored = 0;
	for (int i = 0; i < provider_nsignals; i++) {
		struct sigaction cur;
		if (sigaction(provider_signals[i], NULL, &cur) != 0) {
			continue;
		}
		if (cur.sa_handler != provider_saved[i].sa_handler || cur.sa_flags != provider_saved[i].sa_flags) {
			sigaction(provider_signals[i], &provider_saved[i], NULL);
			restored++;
		}
	}
	return restored;
}

// provider_signals_ignore stands in for a library that takes a signal over.
static void provider_signals_ignore(int sig) {
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(sig, &sa, NULL);
}
*/
import "C"

// Package initialization runs after the Go runtime installed its signal
// handlers and before any MLX backend library initializes.
func init() { C.provider_signals_save() }

// RestoreSignals puts back the signal handlers the Go runtime had before
// MLX's backends initialized, and reports how many had been replaced. GPU
// calls it; call it again after anything that may initialize a backend
// library late (the first evaluation on a device, say).
func RestoreSignals() int { return int(C.provider_signals_restore()) }

// ignoreSignal sets sig's disposition to ignore behind the Go runtime's back,
// as a backend library that takes a signal over does; for tests.
func ignoreSignal(sig int) { C.provider_signals_ignore(C.int(sig)) }
