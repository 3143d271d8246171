package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/goprovider/provider/mlx"
)

// runVersion prints the provider's version, the MLX library's and the
// backends this build of MLX has.
func runVersion(w io.Writer) error {
	gpu := "none"
	th := mlx.NewThread()
	th.Do(func() {
		if ok, err := mlx.GPUAvailable(); err == nil && ok {
			gpu = "available"
		}
	})
	th.Close()
	fmt.Fprintf(w, "provider %s\nmlx %s\nbackends: cpu, gpu %s\nplatform: %s/%s, %s\n", buildVersion(), mlx.Version(), gpu, runtime.GOOS, runtime.GOARCH, runtime.Version())
	return nil
}
