package stages

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Record is one recorded step: the msgpack encoding of what went into a
// stage and what came out, and the error text when it failed. Records hold
// request content (prompts, generated text): they are test and debugging
// material, never telemetry.
type Record struct {
	Stage string
	In    []byte
	Out   []byte
	Err   string
}

// Recorder receives records; implementations must be safe for concurrent
// use.
type Recorder interface {
	Record(Record)
}

// Log keeps records in memory.
type Log struct {
	mu   sync.Mutex
	recs []Record
}

// Record appends r.
func (l *Log) Record(r Record) {
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
}

// Records returns a copy of the records so far, in arrival order.
func (l *Log) Records() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Record(nil), l.recs...)
}

// Trace writes records to a stream as consecutive msgpack values.
type Trace struct {
	mu  sync.Mutex
	enc *msgpack.Encoder
	err error
}

// NewTrace returns a Trace writing to w.
func NewTrace(w io.Writer) *Trace { return &Trace{enc: msgpack.NewEncoder(w)} }

// Record writes r; after the first write error it drops everything and
// Err reports that error.
func (t *Trace) Record(r Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = t.enc.Encode(&r)
	}
}

// Err reports the first write error.
func (t *Trace) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// ReadTrace decodes every record of a stream NewTrace wrote.
func ReadTrace(r io.Reader) ([]Record, error) {
	dec := msgpack.NewDecoder(r)
	var out []Record
	for {
		var rec Record
		err := dec.Decode(&rec)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("stages: trace record %d: %w", len(out), err)
		}
		out = append(out, rec)
	}
}

// Replay re-runs the recorded step r through s: it rebuilds the request
// from r.In, resolves its model through models, and returns the step as
// it ran now. A deterministic stage returns a Record equal to r.
func Replay(s Stage, r Record, models Catalog) (Record, error) {
	var req Request
	if err := msgpack.Unmarshal(r.In, &req); err != nil {
		return Record{}, fmt.Errorf("stages: replay %s: %w", r.Stage, err)
	}
	if req.Params != nil {
		m, ok := models.Lookup(req.Params.Model)
		if !ok {
			return Record{}, fmt.Errorf("stages: replay %s: %w", r.Stage, ErrUnknownModel)
		}
		req.Model = m
	}
	env := &Envelope{Ctx: context.Background(), Req: req}
	var log Log
	Run(s, env, &log)
	recs := log.Records()
	if len(recs) != 1 {
		return Record{}, fmt.Errorf("stages: replay %s: %d records", r.Stage, len(recs))
	}
	return recs[0], nil
}

// Equal reports whether two records describe the same step.
func (r Record) Equal(o Record) bool {
	return r.Stage == o.Stage && r.Err == o.Err && bytes.Equal(r.In, o.In) && bytes.Equal(r.Out, o.Out)
}

func mustEncode(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		// Every recorded type is plain data; failing here is a bug.
		panic(fmt.Sprintf("stages: encode record: %v", err))
	}
	return b
}
