package kvpool

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/goprovider/provider/mlx"
)

// TestBlockRoundTrip writes random payloads into two freshly allocated
// blocks, in float32 and bfloat16, and reads each back byte for byte; the
// second write leaves the first block as it was.
func TestBlockRoundTrip(t *testing.T) {
	for _, dt := range []mlx.Dtype{mlx.Float32, mlx.BFloat16} {
		onMLX(t, func(s mlx.Stream) {
			p, err := New(s, dt, testLayers, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			r := rand.New(rand.NewPCG(1, uint64(dt)))
			var blocks [][]int32
			var payloads [][]byte
			for range 2 {
				b, err := p.AllocBlock()
				if err != nil {
					t.Fatal(err)
				}
				payload := make([]byte, p.PayloadBytes())
				for i := range payload {
					payload[i] = byte(r.IntN(256))
				}
				f := mlx.NewFrame(s)
				if err := p.WriteBlock(f, b, payload); err != nil {
					t.Fatal(err)
				}
				f.Free()
				blocks, payloads = append(blocks, b), append(payloads, payload)
			}
			for i, b := range blocks {
				f := mlx.NewFrame(s)
				got, err := p.ReadBlock(f, b)
				f.Free()
				if err != nil || !bytes.Equal(got, payloads[i]) {
					t.Errorf("%v block %d: read back differs (err %v)", dt, i, err)
				}
				for g, id := range b {
					p.Release(g, id)
				}
			}
			if p.HeldBytes() != 0 {
				t.Errorf("%v: %d bytes held after every block was released", dt, p.HeldBytes())
			}
		})
	}
}
