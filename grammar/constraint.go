package grammar

import (
	"fmt"
	"runtime"
)

// Constraint is one generation's place in a grammar; it implements
// engine.Constraint. It is not safe for concurrent use: the engine calls
// it from one goroutine at a time.
type Constraint struct {
	m       *llgMatcher
	mask    []uint32
	cleanup runtime.Cleanup
}

func newConstraint(m *llgMatcher) *Constraint {
	c := &Constraint{m: m, mask: make([]uint32, m.words)}
	// A generation the engine never accepted is never closed.
	c.cleanup = freeWith(c, m)
	return c
}

// Mask computes the tokens allowed at the next step: bit i%32 of word
// i/32 is token i. Once the grammar is complete only the end-of-sequence
// tokens are allowed. The slice is reused by the next call.
func (c *Constraint) Mask() ([]uint32, error) {
	if err := c.m.maskInto(c.mask); err != nil {
		return nil, fmt.Errorf("grammar: mask: %w", err)
	}
	return c.mask, nil
}

// Accept advances past tok and reports whether the grammar is complete:
// its output is a whole sentence and only end of sequence may follow.
func (c *Constraint) Accept(tok int32) (done bool, err error) {
	if err := c.m.consume(tok); err != nil {
		return false, fmt.Errorf("grammar: token %d: %w", tok, err)
	}
	return c.m.stopped(), nil
}

// Close frees the matcher; the Constraint is unusable afterwards.
func (c *Constraint) Close() {
	if c.m.c == nil {
		return
	}
	c.cleanup.Stop()
	c.m.free()
}
