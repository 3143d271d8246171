package stages

import (
	"errors"
	"slices"
	"testing"

	"github.com/goprovider/provider/cache"
)

func TestCarveSpans(t *testing.T) {
	const img, vid, txt = 900, 901, 5
	a, b, c := MediaItem{Token: img, Count: 3, Hash: [32]byte{'a'}}, MediaItem{Token: img, Count: 2, Hash: [32]byte{'b'}}, MediaItem{Token: vid, Count: 2, Hash: [32]byte{'c'}}
	run := func(tok int32, n int) []int32 { return slices.Repeat([]int32{tok}, n) }
	prompt := func(parts ...[]int32) []int32 { return slices.Concat(parts...) }
	for _, tc := range []struct {
		name   string
		tokens []int32
		items  []MediaItem
		want   []cache.Span
		reason CarveReason
	}{
		{"text", prompt(run(txt, 4)), nil, nil, 0},
		{"one image", prompt(run(txt, 2), run(img, 3), run(txt, 1)), []MediaItem{a}, []cache.Span{{Start: 2, End: 5, Hash: a.Hash}}, 0},
		{"two images in one run", prompt(run(img, 5), run(txt, 1)), []MediaItem{a, b},
			[]cache.Span{{Start: 0, End: 3, Hash: a.Hash}, {Start: 3, End: 5, Hash: b.Hash}}, 0},
		{"image then video frame", prompt(run(txt, 1), run(img, 3), run(txt, 2), run(vid, 2)), []MediaItem{a, c},
			[]cache.Span{{Start: 1, End: 4, Hash: a.Hash}, {Start: 6, End: 8, Hash: c.Hash}}, 0},
		{"missing run", prompt(run(txt, 2), run(img, 3)), []MediaItem{a, b}, nil, CarveMissingRun},
		{"short run", prompt(run(img, 2), run(txt, 1)), []MediaItem{a}, nil, CarveShortRun},
		{"leftover placeholders", prompt(run(img, 4), run(txt, 1)), []MediaItem{a}, nil, CarveLeftover},
		{"a run too many", prompt(run(img, 3), run(txt, 1), run(img, 3)), []MediaItem{a}, nil, CarveLeftover},
		{"video where an image is due", prompt(run(vid, 2), run(img, 3)), []MediaItem{a, c}, nil, CarveWrongToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CarveSpans(tc.tokens, tc.items)
			var ce *CarveError
			switch {
			case tc.reason == 0 && err != nil:
				t.Fatalf("error %v", err)
			case tc.reason != 0 && (!errors.As(err, &ce) || ce.Reason != tc.reason):
				t.Fatalf("error %v, want reason %v", err, tc.reason)
			case !slices.Equal(got, tc.want):
				t.Fatalf("spans %+v, want %+v", got, tc.want)
			}
		})
	}
}
