package tp

import (
	"fmt"

	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// Shard is one rank's loaded share of a model.
type Shard struct {
	Net      model.Network
	Weights  *model.Weights
	Sharding *model.Sharding
}

// Free releases the network and the weights.
func (s *Shard) Free() {
	if s.Net != nil {
		s.Net.Close()
	}
	if s.Weights != nil {
		s.Weights.Free()
	}
}

// LoadShard makes m rank g.Rank()'s share of a split over g (the whole
// model for a group of one), uploads it on stream s and builds its forward
// pass. m.Config must be the settled, unsharded configuration; it becomes
// the share's. It runs on the MLX thread.
func LoadShard(m *model.Model, s mlx.Stream, g mlx.Group) (*Shard, error) {
	sh, err := m.Shard(g.Rank(), g.Size())
	if err != nil {
		return nil, err
	}
	w, err := m.Upload(s)
	if err != nil {
		return nil, err
	}
	return bind(m.Config, w, sh, g)
}

// LoadDummyShard builds rank g.Rank()'s share of d's weights of seed (the
// whole model for a group of one), on stream s, and builds its forward
// pass; progress is Dummy.Build's (may be nil). d.Config must be the
// settled, unsharded configuration; it becomes the share's. It runs on the
// MLX thread.
func LoadDummyShard(d *model.Dummy, seed uint64, s mlx.Stream, g mlx.Group, progress func(done, total int64)) (*Shard, error) {
	sh, err := d.Shard(g.Rank(), g.Size())
	if err != nil {
		return nil, err
	}
	w, err := d.Build(s, seed, progress)
	if err != nil {
		return nil, err
	}
	return bind(d.Config, w, sh, g)
}

// bind marks a share's collectives and builds its forward pass.
func bind(c model.Config, w *model.Weights, sh *model.Sharding, g mlx.Group) (*Shard, error) {
	sh.Bind(w, g)
	net, err := family.Build(c, w)
	if err != nil {
		w.Free()
		return nil, fmt.Errorf("tp: %w", err)
	}
	return &Shard{Net: net, Weights: w, Sharding: sh}, nil
}
