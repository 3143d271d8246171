package mlx

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// threadStat is a thread's name and nice value as the kernel reports them
// in /proc/self/task/TID/stat (comm is field 2, nice field 19).
func threadStat(t *testing.T, tid string) (name string, nice int) {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/task/" + tid + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	fields := strings.Fields(s[end+1:]) // field 3 (state) on
	if nice, err = strconv.Atoi(fields[19-3]); err != nil {
		t.Fatal(err)
	}
	return s[open+1 : end], nice
}

// threads is the process's thread ids now.
func threads(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ents))
	for i, e := range ents {
		ids[i] = e.Name()
	}
	return ids
}

// TestThreadOptions: a Background thread runs at nice 19 under its name
// (cut to Linux's 15 bytes), a plain one at the process's nice; MLX work
// on the background thread computes what it computes on the plain one,
// and the threads MLX starts from it (the CPU worker of a stream it makes)
// carry its name and nice.
func TestThreadOptions(t *testing.T) {
	tid := func(th *Thread) (id string) {
		th.Do(func() { id = strconv.Itoa(syscall.Gettid()) })
		return id
	}
	plain := NewThread()
	defer plain.Close()
	plainTID := tid(plain)
	_, plainNice := threadStat(t, plainTID)
	before := threads(t)
	bg, err := NewThreadWith(ThreadOptions{Name: "tower-of-babel-vision", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bg.Close()
	bgTID := tid(bg)
	const name = "tower-of-babel-"
	if got, nice := threadStat(t, bgTID); got != name || nice != backgroundNice {
		t.Errorf("background thread: name %q nice %d, want %q and %d", got, nice, name, backgroundNice)
	}
	if _, nice := threadStat(t, plainTID); nice != plainNice {
		t.Errorf("plain thread: nice %d after the background thread started, %d before", nice, plainNice)
	}

	product := func(th *Thread) (out []float32) {
		th.Do(func() {
			s, err := NewStreamOn(CPU())
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Free()
			f := NewFrame(s)
			defer f.Free()
			x := f.Float32s([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
			out = f.ToFloat32s(f.MatMul(x, f.Transpose(x, 1, 0)))
			if err := f.Err(); err != nil {
				t.Error(err)
			}
		})
		return out
	}
	if got, want := product(bg), product(plain); !slices.Equal(got, want) || len(got) != 4 {
		t.Errorf("background thread computed %v, plain %v", got, want)
	}
	started := 0
	for _, id := range threads(t) {
		if slices.Contains(before, id) || id == bgTID || id == plainTID {
			continue
		}
		if got, nice := threadStat(t, id); got == name {
			started++
			if nice != backgroundNice {
				t.Errorf("thread %s started from the background thread: nice %d, want %d", id, nice, backgroundNice)
			}
		}
	}
	if started == 0 {
		t.Error("no MLX thread started from the background thread: the CPU work ran elsewhere")
	}
}
