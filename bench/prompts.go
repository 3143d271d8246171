package bench

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
)

// Prompt is one request's text.
type Prompt struct {
	Text string
	// Words is the prompt's length in filler words, about its tokens.
	Words int
	// Prefix is the index of its shared prefix; -1 when it has none.
	Prefix int
}

// fillerWords are short, common English words; with the space before
// them nearly all are a single token in the tokenizers of common model
// families, so a prompt of n words is close to n tokens.
var fillerWords = strings.Fields(`
the of and to in is it that was for on are as with his they at be this
from have or one had by but not what all were we when your can said there
use an each which she do how their if will up other about out many then
them these so some her would make like him into time has look two more
write go see number no way could people my than first water been call who
oil its now find long down day did get come made may part over new sound
take only little work know place year live me back give most very after
thing our just name good sentence man think say great where help through
much before line right too mean old any same tell boy follow came want show
also around form three small set put end does another well large must big
even such because turn here why ask went men read need land different home
us move try kind hand picture again change off play spell air away animal
house point page letter mother answer found study still learn should world
high every near add food between own below country plant last school father
keep tree never start city earth eye light thought head under story saw left
few while along might close something seem next hard open example begin life
always those both paper together got group often run important until children
side feet car mile night walk white sea began grow took river four carry state
once book hear stop without second later miss idea enough eat face watch far
really almost let above girl sometimes mountain cut young talk soon list song
being leave family
`)

// streamArrivals keeps the arrival times' random source apart from the
// prompts'.
const streamArrivals = 2

// source is the deterministic random source of one purpose within one
// level: PCG is specified exactly, so a seed reproduces across platforms
// and Go releases.
func source(seed uint64, stream uint64, level int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream<<32|uint64(level)))
}

// promptSource is the random source of the prompts of level li, or of
// the warm-up for li < 0. Its seed derives from the base seed, the
// prompt set and the level (its index, concurrency and rate; for the
// warm-up, every level), so that servers with a prompt cache (vLLM,
// llama.cpp's server, mlx-lm) never see a prompt twice within a run,
// nor across the runs of one seed that differ in their levels or prompt
// set (a concurrency sweep, then a Poisson run, against the same
// servers): no level reuses another's prompts, or a prefix of them,
// and none reuses the warm-up's. Every target of a run gets the same
// prompts for the same level. A run repeated with the same seed and
// workload repeats its prompts: give it another seed.
func (w *Workload) promptSource(li int) *rand.Rand {
	h := fnv.New64a()
	p := w.Prompts
	fmt.Fprintf(h, "prompts %s %d %g %d %d;", p.Shape, p.Tokens, p.spread(), p.prefixes(), p.prefixTokens())
	levels := w.Levels
	if li >= 0 {
		levels = w.Levels[li : li+1]
		fmt.Fprintf(h, "level %d;", li)
	} else {
		fmt.Fprint(h, "warmup;")
	}
	for _, l := range levels {
		fmt.Fprintf(h, "%d %g;", l.Concurrency, l.Rate)
	}
	return rand.New(rand.NewPCG(w.Seed, h.Sum64()))
}

// levelPrompts builds level li's prompts, one per request. Words are
// drawn independently from a few hundred, so prompts of more than a
// handful of words do not repeat; for the shared-prefix shape each
// prompt's prefix is drawn at random among the level's own prefixes.
func (w *Workload) levelPrompts(li int) []Prompt {
	return w.Prompts.build(w.promptSource(li), w.Requests)
}

// warmupPrompts builds the warm-up's prompts, the same for every
// target and distinct from every level's.
func (w *Workload) warmupPrompts() []Prompt {
	return w.Prompts.build(w.promptSource(-1), w.Warmup)
}

func (p PromptSet) build(r *rand.Rand, n int) []Prompt {
	out := make([]Prompt, n)
	switch p.Shape {
	case PromptsSharedPrefix:
		prefixes := make([]string, p.prefixes())
		for i := range prefixes {
			prefixes[i] = words(r, p.prefixTokens())
		}
		suffix := p.Tokens - p.prefixTokens()
		for i := range out {
			k := r.IntN(len(prefixes))
			out[i] = Prompt{Text: prefixes[k] + " " + words(r, suffix), Words: p.Tokens, Prefix: k}
		}
	case PromptsRandom:
		lo := max(1, int(math.Ceil(float64(p.Tokens)*(1-p.spread()))))
		hi := max(lo, int(math.Floor(float64(p.Tokens)*(1+p.spread()))))
		for i := range out {
			m := lo + r.IntN(hi-lo+1)
			out[i] = Prompt{Text: words(r, m), Words: m, Prefix: -1}
		}
	default:
		for i := range out {
			out[i] = Prompt{Text: words(r, p.Tokens), Words: p.Tokens, Prefix: -1}
		}
	}
	return out
}

// words joins n filler words drawn from r.
func words(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(fillerWords[r.IntN(len(fillerWords))])
	}
	return b.String()
}
