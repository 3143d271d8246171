package tp

import (
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/model"
)

// Environment of a worker process (and of the leader, for the backend).
const (
	envRank    = "PROVIDER_TP_RANK"
	envSize    = "PROVIDER_TP_SIZE"
	envControl = "PROVIDER_TP_CONTROL"
	envBackend = "PROVIDER_TP_BACKEND"
)

// msgKind is what the leader asks of a worker.
type msgKind int

const (
	msgLoad msgKind = iota + 1
	msgStep
	msgUnload
)

// msg is one request from the leader. Slot names a loaded model; Pool one
// KV pool of it (a model's engine and its self-test have their own).
type msg struct {
	Kind   msgKind
	Slot   int
	Pool   int
	Load   *LoadSpec
	Plan   *kvpool.Plan
	Serial uint64
}

// LoadSpec is what every rank needs to load its share of a model: the
// checkpoint, or the dummy model to build instead, and the configuration
// the leader settled (context, numerics), before sharding.
type LoadSpec struct {
	Path   string
	Dummy  *DummySpec
	Device string
	Config model.Config
}

// DummySpec names a dummy model (model.OpenDummy): every rank plans it from
// the same config.json and tokenizer and builds its share with the same
// seed, so together they hold the one process's weights.
type DummySpec struct {
	Config, Tokenizer string
	Seed              uint64
}

// reply is a worker's answer: hello once connected, then one per load.
type reply struct {
	Rank  int
	Slot  int
	Bytes int64
	Err   string
}
