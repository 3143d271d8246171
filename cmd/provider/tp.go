package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tp"
)

// tpFlags are the tensor-parallel flags of generate and serve.
type tpFlags struct {
	size    *int
	backend *string
}

func addTPFlags(fs *flag.FlagSet) *tpFlags {
	return &tpFlags{
		size: fs.Int("tp", 1, "tensor-parallel `ranks`: split each model's heads and feed-forward width over this many processes (this one and tp-1 workers it starts on this machine)"),
		backend: fs.String("dist-backend", "ring", "MLX distributed `backend` of --tp: "+strings.Join(tp.Backends, ", ")+
			" (ring: TCP, any machine; nccl: NVIDIA GPUs; jaccl: RDMA between Macs; mpi: under an MPI launcher)"),
	}
}

// check refuses what tensor parallelism cannot run.
func (tf *tpFlags) check(cmd string, mf *modelFlags) error {
	switch {
	case *tf.size < 1:
		return usageError{fmt.Sprintf("%s: --tp %d: must be at least 1", cmd, *tf.size)}
	case !slices.Contains(tp.Backends, *tf.backend):
		return usageError{fmt.Sprintf("%s: --dist-backend %q: want one of %s", cmd, *tf.backend, strings.Join(tp.Backends, ", "))}
	}
	return nil
}

// start launches the group's workers and joins it on th; a group of one
// starts nothing. device is the --device the ranks run on: the ring and
// mpi backends move host memory only, nccl device memory only, and MLX
// aborts the process on a collective over the other kind.
func (tf *tpFlags) start(cmd, device string, th *mlx.Thread) (*tp.Group, error) {
	if *tf.size > 1 {
		gpu := device == "gpu"
		if device == "" || device == "auto" {
			th.Do(func() { gpu, _ = mlx.GPUAvailable() })
		}
		switch b := *tf.backend; {
		case gpu && (b == "ring" || b == "mpi"):
			return nil, usageError{fmt.Sprintf("%s: --dist-backend %s runs on the CPU, and the model would run on the GPU: pass --device cpu, or --dist-backend nccl on NVIDIA GPUs", cmd, b)}
		case !gpu && b == "nccl":
			return nil, usageError{fmt.Sprintf("%s: --dist-backend nccl runs on NVIDIA GPUs, and the model would run on the CPU: pass --dist-backend ring", cmd)}
		}
	}
	return tp.Start(tp.Options{Size: *tf.size, Backend: *tf.backend}, th.Do)
}

// loadShard loads m (its config settled) from src over g on stream s:
// every rank its share, the leader's wrapped so each step runs on all of
// them. It runs on the MLX thread.
func loadShard(g *tp.Group, src weightSource, device string, m *model.Model, s mlx.Stream) (model.Network, *model.Weights, int, error) {
	spec := src.spec
	spec.Device, spec.Config = device, m.Config
	var shard *tp.Shard
	slot, err := g.Load(spec, func() (err error) {
		shard, err = src.shard(m, s, g.MLX())
		return err
	})
	if err != nil {
		if shard != nil {
			shard.Free()
		}
		return nil, nil, 0, err
	}
	return g.NewLeader(slot, shard.Net), shard.Weights, slot, nil
}

// openModel opens a checkpoint; split over ranks, only this rank's part of
// a GGUF file is converted.
func openModel(path string, ranks int) (*model.Model, error) {
	if ranks > 1 {
		return model.OpenToShard(path)
	}
	return model.Open(path)
}

// checkpointSource is the weight source of the checkpoint at path: upload
// (the opened model's), or each rank its share of the checkpoint.
func checkpointSource(path string, upload func(s mlx.Stream) (*model.Weights, error)) weightSource {
	return weightSource{upload: upload, shard: tp.LoadShard, spec: tp.LoadSpec{Path: path}}
}
