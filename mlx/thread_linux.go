package mlx

import (
	"fmt"
	"syscall"
	"unsafe"
)

// backgroundNice is the nice value of a Background thread: the lowest
// priority Linux's fair scheduler gives, a weight of 15 against a default
// thread's 1024.
const backgroundNice = 19

// setupThread applies o to the calling OS thread. On Linux both the name
// and the nice value are the thread's own, and a thread started from it
// (MLX's stream threads, a BLAS pool) inherits them.
func setupThread(o ThreadOptions) error {
	if o.Name != "" {
		name := []byte(o.Name)
		if len(name) > 15 {
			name = name[:15]
		}
		name = append(name, 0)
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0); errno != 0 {
			return fmt.Errorf("mlx: thread name %q: %w", o.Name, errno)
		}
	}
	if o.Background {
		// PRIO_PROCESS with a thread id sets that thread's nice value
		// alone on Linux, not the whole process's.
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), backgroundNice); err != nil {
			return fmt.Errorf("mlx: background priority: %w", err)
		}
	}
	return nil
}
