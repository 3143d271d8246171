package bench

import (
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

// stream ids keep the random sources of one seed apart.
const (
	streamPrompts  = 1
	streamArrivals = 2
	streamWarmup   = 3
)

// source is the deterministic random source of one purpose within one
// level: PCG is specified exactly, so a seed reproduces across platforms
// and Go releases.
func source(seed uint64, stream uint64, level int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream<<32|uint64(level)))
}

// prompts builds a level's n prompts from the seed and the level's index.
// Words are drawn independently from a few hundred, so prompts of more
// than a handful of words do not repeat; for the shared-prefix shape each
// prompt's prefix is drawn at random among the level's prefixes.
func (p PromptSet) prompts(seed uint64, level, n int) []Prompt {
	return p.build(source(seed, streamPrompts, level), n)
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
