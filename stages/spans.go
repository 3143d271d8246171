package stages

import (
	"fmt"

	"github.com/goprovider/provider/cache"
)

// MediaItem is what the vision tower made of one image or video frame: the
// placeholder token its soft tokens replace in the prompt, how many there
// are, and the hash of the decoded content (it keys the prefix cache).
type MediaItem struct {
	Token int32
	Count int
	Hash  [32]byte
	// Embeds are the soft tokens, Count rows of the language model's
	// hidden size, row-major: what the model reads in place of the
	// placeholders' embeddings.
	Embeds []float32
}

// CarveReason is why a prompt's placeholders and its media disagree: a
// closed set, since the mismatch is the server's fault (its template or
// tower), not the request's.
type CarveReason uint8

// Carve reasons.
const (
	// CarveMissingRun: media items are left when the prompt ends.
	CarveMissingRun CarveReason = iota + 1
	// CarveShortRun: a placeholder run ends inside an item.
	CarveShortRun
	// CarveLeftover: placeholders are left after the last item fits, or
	// a run holds no item.
	CarveLeftover
	// CarveWrongToken: a run's placeholder is not the next item's.
	CarveWrongToken
)

func (r CarveReason) String() string {
	switch r {
	case CarveMissingRun:
		return "missing_run"
	case CarveShortRun:
		return "short_run"
	case CarveLeftover:
		return "leftover_placeholders"
	case CarveWrongToken:
		return "wrong_placeholder"
	}
	return fmt.Sprintf("CarveReason(%d)", uint8(r))
}

// CarveError is a refusal of span carving; the server answers 503 and
// logs the reason.
type CarveError struct {
	Reason CarveReason
	// At is the prompt position or item index where carving stopped.
	At int
}

func (e *CarveError) Error() string {
	return fmt.Sprintf("span carving: %s at %d", e.Reason, e.At)
}

// CarveSpans walks the prompt once and pairs its placeholder runs (maximal
// runs of tokens that are some item's placeholder) with items, strictly in
// order: one span per item, Count placeholders long, several adjacent
// items of one run taking it in turn. Every placeholder must belong to an
// item and every item must find its run.
func CarveSpans(tokens []int32, items []MediaItem) ([]cache.Span, error) {
	placeholder := map[int32]bool{}
	for _, it := range items {
		placeholder[it.Token] = true
	}
	var spans []cache.Span
	next := 0
	for pos := 0; pos < len(tokens); {
		if !placeholder[tokens[pos]] {
			pos++
			continue
		}
		run := pos
		for run < len(tokens) && tokens[run] == tokens[pos] {
			run++
		}
		for pos < run {
			if next == len(items) {
				return nil, &CarveError{Reason: CarveLeftover, At: pos}
			}
			it := items[next]
			switch {
			case it.Token != tokens[pos]:
				return nil, &CarveError{Reason: CarveWrongToken, At: pos}
			case it.Count <= 0 || pos+it.Count > run:
				return nil, &CarveError{Reason: CarveShortRun, At: pos}
			}
			spans = append(spans, cache.Span{Start: pos, End: pos + it.Count, Hash: it.Hash})
			pos += it.Count
			next++
		}
	}
	if next < len(items) {
		return nil, &CarveError{Reason: CarveMissingRun, At: next}
	}
	return spans, nil
}
