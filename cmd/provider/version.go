package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/tp"
)

// runVersion prints the provider's version, the MLX library's and the
// backends this build of MLX has.
func runVersion(w io.Writer) error {
	gpu := "none"
	var dist []string
	th := mlx.NewThread()
	th.Do(func() {
		if ok, err := mlx.GPUAvailable(); err == nil && ok {
			// MLX's GPU backend is Metal on macOS and CUDA elsewhere.
			gpu = "available (cuda)"
			if runtime.GOOS == "darwin" {
				gpu = "available (metal)"
			}
		}
		for _, b := range tp.Backends {
			if mlx.DistributedAvailable(b) {
				dist = append(dist, b)
			}
		}
	})
	th.Close()
	if len(dist) == 0 {
		dist = []string{"none"}
	}
	fmt.Fprintf(w, "provider %s\nmlx %s\nbackends: cpu, gpu %s\ndistributed: %s\nplatform: %s/%s, %s\n",
		buildVersion(), mlx.Version(), gpu, strings.Join(dist, ", "), runtime.GOOS, runtime.GOARCH, runtime.Version())
	return nil
}
