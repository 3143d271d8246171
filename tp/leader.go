package tp

import (
	"bufio"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// Backends are the MLX distributed backends a group may use.
var Backends = []string{"ring", "nccl", "jaccl", "mpi"}

// ErrRankLost: a rank of the group is gone; nothing served over it can run.
var ErrRankLost = errors.New("tp: a tensor-parallel rank was lost")

// Options start a group.
type Options struct {
	Size    int
	Backend string
	// Command runs a worker; its environment carries the rank (default:
	// this executable with the argument tp-worker).
	Command []string
	// Log receives the workers' standard output and error, each line
	// prefixed with its rank (nil: this process's standard error).
	Log io.Writer
	// JoinTimeout bounds the wait for every worker to connect (default 2
	// minutes).
	JoinTimeout time.Duration
}

// Group is the leader's side of a tensor-parallel group: the MLX group, the
// control connections to the workers, and the lock that orders steps.
type Group struct {
	size  int
	mlx   mlx.Group
	peers []*peer

	mu     sync.Mutex // orders loads and steps over the group
	slot   int
	pools  map[*kvpool.Pool]int
	serial uint64

	lostMu sync.Mutex
	lost   error
	lostCh chan struct{}

	procs []*exec.Cmd
}

type peer struct {
	rank    int
	conn    net.Conn
	enc     *gob.Encoder
	dec     *gob.Decoder
	replies chan reply
}

// Start launches ranks 1..Size-1 and joins the MLX group with them; join
// runs fn on the MLX thread (mlx.JoinGroup must run there). With Size 1 it
// returns a group of one: Leader networks then pass through.
func Start(opt Options, join func(fn func())) (*Group, error) {
	if opt.Size < 1 {
		return nil, fmt.Errorf("tp: size %d", opt.Size)
	}
	g := &Group{size: opt.Size, pools: map[*kvpool.Pool]int{}, lostCh: make(chan struct{})}
	if opt.Size == 1 {
		return g, nil
	}
	if !slices.Contains(Backends, opt.Backend) {
		return nil, fmt.Errorf("tp: unknown backend %q (want one of %v)", opt.Backend, Backends)
	}
	var avail bool
	join(func() { avail = mlx.DistributedAvailable(opt.Backend) })
	if !avail {
		return nil, fmt.Errorf("tp: MLX backend %q is not available in this build", opt.Backend)
	}
	ignoreSIGPIPE()
	if opt.Command == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("tp: %w", err)
		}
		opt.Command = []string{exe, "tp-worker"}
	}
	if opt.Log == nil {
		opt.Log = os.Stderr
	}
	if opt.JoinTimeout <= 0 {
		opt.JoinTimeout = 2 * time.Minute
	}
	env, cleanup, err := rendezvous(opt.Backend, opt.Size)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tp: control listener: %w", err)
	}
	defer ln.Close()
	base := append(os.Environ(), env...)
	base = append(base, envSize+"="+strconv.Itoa(opt.Size), envControl+"="+ln.Addr().String(), envBackend+"="+opt.Backend)
	// One Wait per worker: while joining, an exit fails the start; after,
	// it loses the group.
	exited := make(chan error, opt.Size)
	joinedC := make(chan struct{})
	for r := 1; r < opt.Size; r++ {
		cmd := exec.Command(opt.Command[0], opt.Command[1:]...)
		cmd.Env = append(slices.Clone(base), envRank+"="+strconv.Itoa(r), "MLX_RANK="+strconv.Itoa(r))
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			g.kill()
			return nil, fmt.Errorf("tp: starting rank %d: %w", r, err)
		}
		g.procs = append(g.procs, cmd)
		go prefixLines(opt.Log, fmt.Sprintf("[rank %d] ", r), out)
		go func() {
			err := cmd.Wait()
			select {
			case <-joinedC:
				g.fail(fmt.Errorf("%w: rank %d exited (%v)", ErrRankLost, r, err))
			default:
				exited <- fmt.Errorf("tp: rank %d exited while joining: %v", r, err)
			}
		}()
	}
	g.peers = make([]*peer, opt.Size-1)
	accepted := make(chan error, 1)
	go func() {
		for range opt.Size - 1 {
			c, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			var hello reply
			dec := gob.NewDecoder(c)
			if err := dec.Decode(&hello); err != nil || hello.Rank < 1 || hello.Rank >= opt.Size || g.peers[hello.Rank-1] != nil {
				c.Close()
				accepted <- fmt.Errorf("tp: bad hello from a worker (%v)", err)
				return
			}
			g.peers[hello.Rank-1] = &peer{rank: hello.Rank, conn: c, enc: gob.NewEncoder(c), dec: dec, replies: make(chan reply, 4)}
		}
		accepted <- nil
	}()
	select {
	case err = <-accepted:
	case err = <-exited:
	case <-time.After(opt.JoinTimeout):
		err = fmt.Errorf("tp: the workers did not connect within %s", opt.JoinTimeout)
	}
	if err != nil {
		g.kill()
		return nil, err
	}
	for _, kv := range env {
		k, v, _ := cutEnv(kv)
		os.Setenv(k, v)
	}
	os.Setenv("MLX_RANK", "0")
	joined := make(chan error, 1)
	go join(func() {
		var err error
		g.mlx, err = mlx.JoinGroup(opt.Backend)
		joined <- err
	})
	select {
	case err = <-joined:
	case err = <-exited:
	case <-time.After(opt.JoinTimeout):
		err = fmt.Errorf("tp: the %s group did not form within %s", opt.Backend, opt.JoinTimeout)
	}
	if err != nil {
		g.kill()
		return nil, err
	}
	if g.mlx.Size() != opt.Size {
		g.kill()
		return nil, fmt.Errorf("tp: the %s group has %d ranks, want %d", opt.Backend, g.mlx.Size(), opt.Size)
	}
	close(joinedC)
	for _, p := range g.peers {
		go g.read(p)
	}
	return g, nil
}

// rendezvous is the backend's environment for a group of size on this
// machine, and what removes its files.
func rendezvous(backend string, size int) ([]string, func(), error) {
	switch backend {
	case "ring":
		hosts := make([][]string, size)
		for r := range hosts {
			port, err := freePort()
			if err != nil {
				return nil, nil, err
			}
			hosts[r] = []string{"127.0.0.1:" + strconv.Itoa(port)}
		}
		f, err := os.CreateTemp("", "provider-tp-hosts-*.json")
		if err != nil {
			return nil, nil, fmt.Errorf("tp: %w", err)
		}
		json.NewEncoder(f).Encode(hosts)
		f.Close()
		return []string{"MLX_HOSTFILE=" + f.Name()}, func() { os.Remove(f.Name()) }, nil
	case "nccl":
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		return []string{"NCCL_HOST_IP=127.0.0.1", "NCCL_PORT=" + strconv.Itoa(port), "MLX_WORLD_SIZE=" + strconv.Itoa(size)}, func() {}, nil
	default:
		// jaccl and mpi take their rendezvous from the environment the
		// user gives (MLX_IBV_DEVICES, an MPI launcher).
		return nil, func() {}, nil
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("tp: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func cutEnv(kv string) (string, string, bool) {
	for i := range len(kv) {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

func prefixLines(w io.Writer, prefix string, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		fmt.Fprintf(w, "%s%s\n", prefix, sc.Text())
	}
}

// read delivers a worker's replies until its connection ends, which loses
// the group.
func (g *Group) read(p *peer) {
	for {
		var r reply
		if err := p.dec.Decode(&r); err != nil {
			g.fail(fmt.Errorf("%w: rank %d's control connection ended (%v)", ErrRankLost, p.rank, err))
			return
		}
		select {
		case p.replies <- r:
		case <-g.lostCh:
			return
		}
	}
}

// fail records the first loss and wakes every waiter.
func (g *Group) fail(err error) {
	g.lostMu.Lock()
	defer g.lostMu.Unlock()
	if g.lost == nil {
		g.lost = err
		close(g.lostCh)
	}
}

// Lost is why the group can no longer run (nil while it can).
func (g *Group) Lost() error {
	if g == nil {
		return nil
	}
	g.lostMu.Lock()
	defer g.lostMu.Unlock()
	return g.lost
}

// LostC is closed when the group is lost (never for a nil Group).
func (g *Group) LostC() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.lostCh
}

// Size is the number of ranks (1 for a nil Group).
func (g *Group) Size() int {
	if g == nil {
		return 1
	}
	return g.size
}

// MLX is the MLX group the collectives run over (the zero Group for one
// rank).
func (g *Group) MLX() mlx.Group { return g.mlx }

// Close stops the workers; the group is lost after.
func (g *Group) Close() {
	g.fail(fmt.Errorf("%w: the group was closed", ErrRankLost))
	for _, p := range g.peers {
		if p != nil {
			p.conn.Close()
		}
	}
	g.kill()
}

func (g *Group) kill() {
	for _, c := range g.procs {
		if c.Process != nil {
			c.Process.Kill()
		}
	}
}

// send writes m to every worker.
func (g *Group) send(m msg) error {
	if err := g.Lost(); err != nil {
		return err
	}
	for _, p := range g.peers {
		p.conn.SetWriteDeadline(time.Now().Add(time.Minute))
		if err := p.enc.Encode(&m); err != nil {
			err = fmt.Errorf("%w: rank %d: %v", ErrRankLost, p.rank, err)
			g.fail(err)
			return err
		}
	}
	return nil
}

// Load has every rank load its share of the model spec names: the workers
// theirs (the call waits for them), the leader its own through local, which
// runs while they load. It returns the model's slot for Leader.
func (g *Group) Load(spec LoadSpec, local func() error) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.slot++
	slot := g.slot
	if g.size == 1 {
		return slot, local()
	}
	if err := g.send(msg{Kind: msgLoad, Slot: slot, Load: &spec}); err != nil {
		return 0, err
	}
	errs := []error{local()}
	for _, p := range g.peers {
		select {
		case r := <-p.replies:
			if r.Err != "" {
				errs = append(errs, fmt.Errorf("tp: rank %d: %s", p.rank, r.Err))
			}
		case <-g.lostCh:
			return 0, g.Lost()
		}
	}
	if err := errors.Join(errs...); err != nil {
		g.send(msg{Kind: msgUnload, Slot: slot})
		return 0, err
	}
	return slot, nil
}

// Unload has the workers free their share of slot.
func (g *Group) Unload(slot int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.size > 1 {
		g.send(msg{Kind: msgUnload, Slot: slot})
	}
}

// Leader is the leader's share of a model served over a group: a
// model.Network whose every step runs on all ranks.
type Leader struct {
	g    *Group
	slot int
	net  model.Network
}

// NewLeader wraps net, the leader's share of slot. The result reads input
// embeddings (model.EmbedReader) when net does.
func (g *Group) NewLeader(slot int, net model.Network) model.Network {
	l := &Leader{g: g, slot: slot, net: net}
	if _, ok := net.(model.EmbedReader); ok {
		return &embedLeader{l}
	}
	return l
}

// embedLeader is a Leader over a network that reads input embeddings.
type embedLeader struct{ *Leader }

func (*embedLeader) ReadsEmbeds() {}

// Config is the leader's share's configuration (its heads, its KV heads:
// what one rank's pool holds).
func (l *Leader) Config() model.Config { return l.net.Config() }

// Close closes the leader's share.
func (l *Leader) Close() { l.net.Close() }

// Forward sends b's plan to the workers, runs the leader's share and
// evaluates it, all under the group's lock (see the package doc).
func (l *Leader) Forward(f *mlx.Frame, b *kvpool.Batch) mlx.Array {
	g := l.g
	if g.size == 1 {
		return l.net.Forward(f, b)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	id, ok := g.pools[b.Pool()]
	if !ok {
		id = len(g.pools) + 1
		g.pools[b.Pool()] = id
	}
	plan := b.Plan()
	g.serial++
	if err := g.send(msg{Kind: msgStep, Slot: l.slot, Pool: id, Plan: &plan, Serial: g.serial}); err != nil {
		f.Fail(err)
		return mlx.Array{}
	}
	logits := l.net.Forward(f, b)
	if err := f.Eval(logits); err != nil {
		if lost := g.Lost(); lost != nil {
			f.Fail(lost)
		}
		return mlx.Array{}
	}
	return logits
}

var _ model.Network = (*Leader)(nil)

// ignoreSIGPIPE makes a write to a lost peer an error instead of the end of
// the process: the backends' sockets are written from threads Go does not
// own, where an unwanted SIGPIPE takes the signal's default action. Wanted
// through Notify, it is only delivered (and dropped: nothing reads the
// channel), and the write fails with EPIPE. Unlike an ignored disposition,
// this survives mlx.RestoreSignals.
func ignoreSIGPIPE() { signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) }
