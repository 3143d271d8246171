package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// firstToken streams a short completion and returns the time to its first
// data event.
func firstToken(t *testing.T, url string) time.Duration {
	t.Helper()
	start := time.Now()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":4,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			took := time.Since(start)
			_, _ = io.Copy(io.Discard, resp.Body)
			return took
		}
	}
	t.Fatal("no data event")
	return 0
}

func medianFirstToken(t *testing.T, url string) time.Duration {
	var ds []time.Duration
	for range 7 {
		ds = append(ds, firstToken(t, url))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// rss is a process's resident set in bytes.
func rss(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			return kb << 10
		}
	}
	return 0
}

// TestServeHostileClients: 1,000 idle connections, 20 slowloris clients
// sending a header line a second, and a body trickled at 1 byte/s do not
// stop a normal request from being served; the slowloris connections are
// closed by the 10 s header deadline. The first-token times with and
// without them are logged (speed is the benchmarks' business).
func TestServeHostileClients(t *testing.T) {
	cmd, url, _, _ := startServe(t, nil, "--model", stories)
	addr := strings.TrimPrefix(url, "http://")
	unloaded := medianFirstToken(t, url)
	before := rss(t, cmd.Process.Pid)

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 1000 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	slow := make(chan error, 20)
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		go func() {
			fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
			for i := 0; ; i++ {
				time.Sleep(time.Second) // the attack's own pace
				if _, err := fmt.Fprintf(c, "X-Slow-%d: y\r\n", i); err != nil {
					slow <- nil // the server closed it
					return
				}
				if i > 30 {
					slow <- fmt.Errorf("a slowloris connection still open after %d s", i)
					return
				}
			}
		}()
	}
	trickle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, trickle)
	fmt.Fprintf(trickle, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
	go func() {
		for range 100 {
			if _, err := trickle.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(time.Second) // 1 byte/s
		}
	}()

	loaded := medianFirstToken(t, url)
	during := rss(t, cmd.Process.Pid)
	for range 20 {
		if err := <-slow; err != nil {
			t.Error(err)
		}
	}
	t.Logf("first token: %s unloaded, %s with 1,000 idle connections, 20 slowloris and a trickled body; RSS %.1f -> %.1f MiB",
		unloaded, loaded, float64(before)/(1<<20), float64(during)/(1<<20))
}

// TestServeHostileBodies: 100 clients each sending a body just under the
// 32 MiB limit at once. The body budget (256 MiB) lets about 7 be held at
// a time, the others wait for it at most the intake wait and get 429; RSS
// stays near the budget. Meanwhile normal requests one after another keep
// their first token near its unloaded time: their bodies take no share a
// large body waits for, and large bodies' parsing leaves a stage worker
// and a core free. The first-token times are logged, not asserted (speed
// is the benchmarks' business).
func TestServeHostileBodies(t *testing.T) {
	cmd, url, _, _ := startServe(t, nil, "--model", stories)
	unloaded := medianFirstToken(t, url)

	// The uploaders run in a process of their own, as hostile clients
	// would: this one then holds only the normal client.
	up := exec.Command(os.Args[0], "-test.run=^TestHostileUploaders$")
	up.Env = append(os.Environ(), "HOSTILE_UPLOAD_URL="+url)
	up.Stderr = os.Stderr
	out, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	// The uploaders say "start" as they start (after the test binary's own
	// set-up), then print one status code a line.
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "start" {
	}
	count := map[int]int{}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for sc.Scan() {
			var code int
			if _, err := fmt.Sscan(sc.Text(), &code); err == nil {
				count[code]++
			}
		}
	}()
	// Normal requests one after another while the bodies stream in; only
	// those that ended before the last upload count as loaded.
	var loaded []time.Duration
	var peak int64
	for during := true; during; {
		d := firstToken(t, url)
		peak = max(peak, rss(t, cmd.Process.Pid))
		select {
		case <-finished:
			during = false
		default:
			loaded = append(loaded, d)
		}
	}
	if err := up.Wait(); err != nil {
		t.Fatalf("uploaders: %v", err)
	}
	// 0: the server answered 429 and closed the connection while the
	// client was still sending its body (a reset on the client's side).
	if count[200]+count[429]+count[0] != 100 || count[200] == 0 {
		t.Errorf("32 MiB bodies answered %v, want only 200, 429 or a closed connection", count)
	}
	if peak > 1<<30 {
		t.Errorf("RSS reached %d bytes under the 32 MiB bodies; the body budget is 256 MiB", peak)
	}
	if len(loaded) == 0 {
		t.Fatal("no normal request ended while the bodies streamed in")
	}
	sort.Slice(loaded, func(i, j int) bool { return loaded[i] < loaded[j] })
	t.Logf("100 bodies of 32 MiB at once: %v; first token %s unloaded, meanwhile median %s, p90 %s, max %s (%d requests); RSS peak %.1f MiB (body budget 256 MiB)",
		count, unloaded, loaded[len(loaded)/2], loaded[len(loaded)*9/10], loaded[len(loaded)-1], len(loaded), float64(peak)/(1<<20))
}

// TestHostileUploaders is TestServeHostileBodies' other process: with
// HOSTILE_UPLOAD_URL set, 100 clients post a body just under 32 MiB at
// once, and each prints its status code (0: the connection was closed).
func TestHostileUploaders(t *testing.T) {
	url := os.Getenv("HOSTILE_UPLOAD_URL")
	if url == "" {
		t.Skip("the uploaders of TestServeHostileBodies")
	}
	head := `{"model":"stories260K","prompt":"Once","max_tokens":1}`
	big := append([]byte(head), bytes.Repeat([]byte(" "), 32<<20-1024-len(head))...)
	var wg sync.WaitGroup
	var mu sync.Mutex
	fmt.Println("start")
	for range 100 {
		wg.Go(func() {
			// One shared body: the clients copy nothing of their own.
			code := 0
			if resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(big)); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			fmt.Println(code)
			mu.Unlock()
		})
	}
	wg.Wait()
}
