package main

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startServe runs serve with args and extra environment, and returns the
// process, its address once it listens, and its log so far. wait waits
// for the process after its log has been read to the end (exec.Cmd.Wait
// closes the pipe, so it must not run before).
func startServe(t testing.TB, env []string, args ...string) (cmd *exec.Cmd, url string, log func() string, wait func() error) {
	t.Helper()
	cmd = exec.Command(binPath, append([]string{"serve", "--log-format", "text", "--no-auth", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir()), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var logs strings.Builder
	lines := bufio.NewScanner(stderr)
	addr := ""
	for addr == "" && lines.Scan() {
		logs.WriteString(lines.Text() + "\n")
		_, addr, _ = strings.Cut(lines.Text(), "msg=listening addr=")
	}
	if addr == "" {
		t.Fatalf("serve never listened:\n%s", logs.String())
	}
	var mu sync.Mutex
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		for lines.Scan() {
			mu.Lock()
			logs.WriteString(lines.Text() + "\n")
			mu.Unlock()
		}
	}()
	log = func() string {
		mu.Lock()
		defer mu.Unlock()
		return logs.String()
	}
	wait = func() error {
		<-eof
		return cmd.Wait()
	}
	return cmd, "http://" + addr, log, wait
}

// TestServeDrainsOnSIGTERM: SIGTERM during 32 streams: new requests get
// 503 on the still open port, every stream ends with a finish_reason and
// [DONE] (finished, or cut at the 10 s drain deadline), and the process
// exits 0 soon after the deadline.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	cmd, url, _, wait := startServe(t, nil, "--model", stories, "--max-concurrent", "32")
	const streams = 32
	type result struct {
		finish, last string
		err          error
	}
	results := make(chan result, streams)
	started := make(chan struct{}, streams)
	client := &http.Client{Timeout: time.Minute}
	for range streams {
		go func() {
			body := `{"model":"stories260K","prompt":"Once upon a time","max_tokens":2000,"ignore_eos":true,"stream":true}`
			resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				results <- result{err: err}
				started <- struct{}{}
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			var r result
			first := true
			for sc.Scan() {
				line, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				if first {
					started <- struct{}{}
					first = false
				}
				r.last = line
				if i := strings.Index(line, `"finish_reason":"`); i >= 0 {
					r.finish, _, _ = strings.Cut(line[i+len(`"finish_reason":"`):], `"`)
				}
			}
			if first {
				started <- struct{}{}
			}
			r.err = sc.Err()
			results <- r
		}()
	}
	for range streams {
		<-started
	}
	signalled := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The port stays open while draining: /health turns 503, and a new
	// request is refused with 503.
	for {
		resp, err := client.Get(url + "/health")
		if err != nil {
			t.Fatalf("/health while draining: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == 503 {
			break
		}
		if time.Since(signalled) > 5*time.Second {
			t.Fatal("/health never reported draining")
		}
	}
	resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"stories260K","prompt":"x","max_tokens":2}`))
	if err != nil {
		t.Fatalf("a request while draining: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), `"draining"`) {
		t.Fatalf("a request while draining: %d %s", resp.StatusCode, b)
	}
	for range streams {
		r := <-results
		if r.err != nil || r.last != "[DONE]" || (r.finish != "length" && r.finish != "abort") {
			t.Errorf("stream ended with finish %q, last event %q, error %v", r.finish, r.last, r.err)
		}
	}
	err = wait()
	took := time.Since(signalled)
	var ee *exec.ExitError
	if errors.As(err, &ee) || err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if took > 14*time.Second {
		t.Fatalf("took %s to stop after SIGTERM; the drain deadline is 10 s", took)
	}
}

// TestServeExitsWhenEnginesDie: an engine whose steps panic (fault
// injection) makes /health 503; it is rebuilt, dies again within the
// cooldown, its slot is unloaded, and with no model left serve exits 1.
func TestServeExitsWhenEnginesDie(t *testing.T) {
	_, url, log, wait := startServe(t, []string{faultEnv + "=1"}, "--model", stories)
	client := &http.Client{Timeout: 10 * time.Second}
	exited := make(chan error, 1)
	go func() { exited <- wait() }()
	unhealthy := false
	deadline := time.After(60 * time.Second)
	for {
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !unhealthy {
				t.Fatalf("exit %v, /health seen 503: %v; log:\n%s", err, unhealthy, log())
			}
			if !strings.Contains(log(), `msg="engine rebuilt"`) || !strings.Contains(log(), "no healthy model left") {
				t.Fatalf("log:\n%s", log())
			}
			return
		case <-deadline:
			t.Fatalf("serve still running; log:\n%s", log())
		case <-time.After(200 * time.Millisecond):
		}
		if resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"stories260K","prompt":"x","max_tokens":2}`)); err == nil {
			resp.Body.Close()
		}
		if resp, err := client.Get(url + "/health"); err == nil {
			unhealthy = unhealthy || resp.StatusCode == 503
			resp.Body.Close()
		}
	}
}
