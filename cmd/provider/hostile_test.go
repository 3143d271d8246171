package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
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

	// 100 clients each sending a body just under the 32 MiB limit at once:
	// the body budget (256 MiB) lets about 8 be read at a time, the others
	// wait for it at most the intake wait and get 429; RSS stays near the
	// budget.
	big := append([]byte(`{"model":"stories260K","prompt":"Once","max_tokens":1}`), make([]byte, 32<<20-1024)...)
	for i := len(`{"model":"stories260K","prompt":"Once","max_tokens":1}`); i < len(big); i++ {
		big[i] = ' '
	}
	codes := make(chan int, 100)
	var peak int64
	for range 100 {
		go func() {
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(big)))
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	bigLoaded := firstToken(t, url)
	count := map[int]int{}
	for range 100 {
		peak = max(peak, rss(t, cmd.Process.Pid))
		count[<-codes]++
	}
	// 0: the server answered 429 and closed the connection while the
	// client was still sending its body (a reset on the client's side).
	if count[200]+count[429]+count[0] != 100 || count[200] == 0 {
		t.Errorf("32 MiB bodies answered %v, want only 200, 429 or a closed connection", count)
	}
	if peak > 1<<30 {
		t.Errorf("RSS reached %d bytes under the 32 MiB bodies; the body budget is 256 MiB", peak)
	}
	t.Logf("100 bodies of 32 MiB at once: %v; first token meanwhile %s; RSS peak seen %.1f MiB (body budget 256 MiB)",
		count, bigLoaded, float64(peak)/(1<<20))
}
