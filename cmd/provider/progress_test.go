package main

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// Off a terminal a load of a large model logs a line each quarter; a small
// one logs nothing.
func TestProgressLogsQuarters(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p := newProgress(w, "loading big", log)
	const total = 1 << 30
	for done := int64(0); done <= total; done += total / 100 {
		p.report(done, total)
	}
	p.report(total, total)
	p.done()
	if n := strings.Count(logs.String(), `msg="loading big"`); n != 4 {
		t.Fatalf("%d log lines, want 4 (25, 50, 75, 100 %%):\n%s", n, logs.String())
	}
	logs.Reset()
	small := newProgress(w, "loading small", log)
	small.report(1, 2)
	small.report(2, 2)
	if logs.Len() != 0 {
		t.Fatalf("a small load logged %q", logs.String())
	}
}
