package tp

import (
	"encoding/gob"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// IsWorker reports whether this process was started as a worker rank.
func IsWorker() bool { return os.Getenv(envRank) != "" }

// workerModel is a worker's share of one slot and its pools.
type workerModel struct {
	shard *Shard
	model *model.Model
	pools map[int]*kvpool.Pool
}

// RunWorker is a worker rank's life: connect to the leader, join the MLX
// group, then load, step and unload models as the leader asks until it
// goes away (nil) or a step cannot run (the error; the process must then
// exit, so the leader's collectives fail instead of waiting).
func RunWorker() error {
	rank, err := strconv.Atoi(os.Getenv(envRank))
	if err != nil || rank < 1 {
		return fmt.Errorf("tp: worker: %s=%q", envRank, os.Getenv(envRank))
	}
	ignoreSIGPIPE()
	conn, err := net.Dial("tcp", os.Getenv(envControl))
	if err != nil {
		return fmt.Errorf("tp: worker %d: control: %w", rank, err)
	}
	defer conn.Close()
	enc, dec := gob.NewEncoder(conn), gob.NewDecoder(conn)
	if err := enc.Encode(&reply{Rank: rank}); err != nil {
		return fmt.Errorf("tp: worker %d: hello: %w", rank, err)
	}
	th := mlx.NewThread()
	defer th.Close()
	var g mlx.Group
	th.Do(func() { g, err = mlx.JoinGroup(os.Getenv(envBackend)) })
	if err != nil {
		return fmt.Errorf("tp: worker %d: %w", rank, err)
	}
	if g.Rank() != rank {
		return fmt.Errorf("tp: worker %d joined as rank %d", rank, g.Rank())
	}
	models := map[int]*workerModel{}
	defer th.Do(func() {
		for _, wm := range models {
			wm.free()
		}
	})
	var s mlx.Stream
	streamed := false
	for {
		var m msg
		if err := dec.Decode(&m); err != nil {
			return nil // the leader went away
		}
		switch m.Kind {
		case msgLoad:
			var wm *workerModel
			th.Do(func() {
				if !streamed {
					if s, err = mlx.StreamFor(m.Load.Device); err != nil {
						return
					}
					streamed = true
				}
				wm, err = loadWorker(*m.Load, s, g)
			})
			r := reply{Rank: rank, Slot: m.Slot}
			if err != nil {
				r.Err = err.Error()
			} else {
				models[m.Slot] = wm
				r.Bytes = wm.shard.Weights.Bytes()
			}
			if err := enc.Encode(&r); err != nil {
				return nil
			}
		case msgUnload:
			if wm := models[m.Slot]; wm != nil {
				th.Do(wm.free)
				delete(models, m.Slot)
			}
		case msgStep:
			wm := models[m.Slot]
			if wm == nil || m.Plan == nil {
				return fmt.Errorf("tp: worker %d: step %d of slot %d, which is not loaded", rank, m.Serial, m.Slot)
			}
			th.Do(func() { err = wm.step(s, m.Pool, *m.Plan) })
			if err != nil {
				return fmt.Errorf("tp: worker %d: step %d: %w", rank, m.Serial, err)
			}
		default:
			return fmt.Errorf("tp: worker %d: unknown request %d", rank, m.Kind)
		}
	}
}

func loadWorker(spec LoadSpec, s mlx.Stream, g mlx.Group) (*workerModel, error) {
	if spec.Dummy != nil {
		m, d, err := model.OpenDummy(spec.Dummy.Config, spec.Dummy.Tokenizer)
		if err != nil {
			return nil, err
		}
		d.Config = spec.Config
		shard, err := LoadDummyShard(d, spec.Dummy.Seed, s, g, nil)
		if err != nil {
			return nil, err
		}
		m.Config = d.Config
		return &workerModel{shard: shard, model: m, pools: map[int]*kvpool.Pool{}}, nil
	}
	m, err := model.OpenToShard(spec.Path)
	if err != nil {
		return nil, err
	}
	m.Config = spec.Config
	shard, err := LoadShard(m, s, g)
	if err != nil {
		m.Close()
		return nil, err
	}
	return &workerModel{shard: shard, model: m, pools: map[int]*kvpool.Pool{}}, nil
}

func (wm *workerModel) free() {
	for _, p := range wm.pools {
		p.Close()
	}
	wm.shard.Free()
	wm.model.Close()
}

// step runs the leader's plan over the worker's pool id.
func (wm *workerModel) step(s mlx.Stream, id int, plan kvpool.Plan) error {
	p := wm.pools[id]
	if p == nil {
		var err error
		if p, err = model.NewPool(wm.shard.Net, s, kvpool.Options{}); err != nil {
			return err
		}
		wm.pools[id] = p
	}
	f := mlx.NewFrame(s)
	defer f.Free()
	b, err := p.BeginPlan(f, plan)
	if err != nil {
		return err
	}
	logits := wm.shard.Net.Forward(f, b)
	if err := f.Eval(logits); err != nil {
		return err
	}
	if !logits.Valid() {
		return errors.New("no logits")
	}
	return nil
}
