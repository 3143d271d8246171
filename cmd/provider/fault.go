package main

import (
	"os"
	"strconv"
	"sync/atomic"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// faultEnv, set to n, makes every model's forward steps after the n-th
// panic: fault injection, for tests of engine death and recovery. Never
// set it in production.
const faultEnv = "PROVIDER_FAULT_STEP_PANIC"

// faultNet is a network whose steps after the first after panic.
type faultNet struct {
	model.Network
	after int64
	steps atomic.Int64
}

func (f *faultNet) Forward(fr *mlx.Frame, b *kvpool.Batch) mlx.Array {
	if f.steps.Add(1) > f.after {
		panic("injected fault (" + faultEnv + ")")
	}
	return f.Network.Forward(fr, b)
}

// withFaults wraps net when faultEnv is set.
func withFaults(net model.Network) model.Network {
	n, err := strconv.ParseInt(os.Getenv(faultEnv), 10, 64)
	if err != nil || n < 0 {
		return net
	}
	return &faultNet{Network: net, after: n}
}
