package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/distsync/distsync/internal/testrun"
)

// The "miniredis" backend runs in a process of its own, as redis-server does: this test
// binary, run again with envMini set, which serves miniredis instances for the tests of the
// binary that started it (see [miniProc]). In the test's own process, miniredis's Lua (a new
// interpreter for every script call, built with -race) competed with the tests for the
// process's threads and its garbage collector: on a machine busy with other work, a test's
// server then answered seconds late while the test's goroutines were barely delayed, so
// leases lapsed that no stall of the process explains. A server process of its own gets its
// share of the machine from the kernel, as a real Redis does.
//
// The process reads one request per line on its standard input and answers each with one
// line, "ok [...]" or "err <message>":
//
//	start <port>   a new miniredis on 127.0.0.1:<port> (TTLs follow the real clock) -> ok <id>
//	close <id>     stop it; it may be restarted
//	restart <id>   start it again on its port, its data kept
//	dump <id>      -> ok <its Dump, quoted>
//	stop <id>      stop it for good
//	stalled <from> <to>   -> ok <the longest and the total stall of this process between the
//	               two times (Unix ns), in ns>: [Stalled] allows for it as for its own
//
// It ends when its standard input does (the test binary exited or closed it), stopping every
// server it runs.
const envMini = "DISTSYNC_REDISTEST_MINIREDIS"

func init() {
	if os.Getenv(envMini) == "1" {
		serveMini(os.Stdin, os.Stdout)
		testrun.Exit(0)
	}
}

// serveMini answers the requests of r on w until r ends, then stops every server.
func serveMini(r io.Reader, w io.Writer) {
	WatchStalls() // a server that waits to run is a stall of the tests that use it
	servers := map[int]*miniredis.Miniredis{}
	next := 0
	in := bufio.NewScanner(r)
	out := bufio.NewWriter(w)
	for in.Scan() {
		verb, arg, _ := strings.Cut(in.Text(), " ")
		n, err := strconv.Atoi(arg)
		reply := "ok"
		switch m := servers[n]; {
		case verb == "stalled":
			var from, to int64
			if _, err := fmt.Sscan(arg, &from, &to); err != nil {
				reply = fmt.Sprintf("err bad request %q", in.Text())
				break
			}
			f, t := time.Unix(0, from), time.Unix(0, to)
			reply = fmt.Sprintf("ok %d %d", localStalled(f, t), localStalledTotal(f, t))
		case err != nil:
			reply = fmt.Sprintf("err bad request %q", in.Text())
		case verb == "start":
			m = miniredis.NewMiniRedis()
			m.ClockTTL(true)
			if err := m.StartAddr("127.0.0.1:" + arg); err != nil {
				reply = "err " + oneLine(err.Error())
				break
			}
			next++
			servers[next] = m
			reply = "ok " + strconv.Itoa(next)
		case m == nil:
			reply = fmt.Sprintf("err no server %d", n)
		case verb == "close":
			m.Close()
		case verb == "restart":
			if err := m.Restart(); err != nil {
				reply = "err " + oneLine(err.Error())
			}
		case verb == "dump":
			reply = "ok " + strconv.Quote(m.Dump())
		case verb == "stop":
			m.Close()
			delete(servers, n)
		default:
			reply = fmt.Sprintf("err bad request %q", in.Text())
		}
		fmt.Fprintln(out, reply)
		if out.Flush() != nil {
			break
		}
	}
	for _, m := range servers {
		m.Close()
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// miniProc is the process that serves this test binary's miniredis servers, started on
// first use and stopped by [Main].
var miniProc struct {
	once sync.Once
	err  error
	mu   sync.Mutex // one request at a time
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
}

func startMiniProc() {
	exe, err := os.Executable()
	if err != nil {
		miniProc.err = err
		return
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), envMini+"=1"), testrun.ChildEnv()...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		miniProc.err = err
		return
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		miniProc.err = err
		return
	}
	if err := cmd.Start(); err != nil {
		miniProc.err = fmt.Errorf("start the miniredis process: %w", err)
		return
	}
	miniProc.cmd, miniProc.in, miniProc.out = cmd, in, bufio.NewScanner(out)
	miniProc.out.Buffer(nil, 64<<20) // a dump of a server can be long
}

// StopMini stops the process that serves the "miniredis" backend's servers, if one was
// started: its input ends, so it stops its servers and exits; after 5 s it is killed. [Main]
// calls it; a TestMain of its own calls it after the tests. (The process also ends when the
// test binary does, with its input.)
func StopMini() {
	miniProc.once.Do(func() { miniProc.err = errors.New("redistest: stopped") })
	miniProc.mu.Lock()
	defer miniProc.mu.Unlock()
	if miniProc.cmd == nil {
		return
	}
	_ = miniProc.in.Close()
	done := make(chan struct{})
	go func() {
		_ = miniProc.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = miniProc.cmd.Process.Kill()
		<-done
	}
	miniProc.cmd = nil
	miniProc.err = errors.New("redistest: the miniredis process was stopped")
}

// miniRequest sends one request to the miniredis process and returns what its "ok" reply
// carries.
func miniRequest(format string, args ...any) (string, error) {
	miniProc.once.Do(startMiniProc)
	miniProc.mu.Lock()
	defer miniProc.mu.Unlock()
	if miniProc.err != nil {
		return "", miniProc.err
	}
	req := fmt.Sprintf(format, args...)
	if _, err := fmt.Fprintln(miniProc.in, req); err != nil {
		return "", fmt.Errorf("redistest: miniredis process: %s: %w", req, err)
	}
	if !miniProc.out.Scan() {
		err := miniProc.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return "", fmt.Errorf("redistest: miniredis process: %s: %w", req, err)
	}
	verb, rest, _ := strings.Cut(miniProc.out.Text(), " ")
	if verb != "ok" {
		return "", fmt.Errorf("redistest: miniredis process: %s: %s", req, rest)
	}
	return rest, nil
}

// miniStalled returns the longest and the total stall of the miniredis process between from
// and to, or zeros if this test binary started none (or it cannot say).
func miniStalled(from, to time.Time) (worst, total time.Duration) {
	miniProc.mu.Lock()
	started := miniProc.cmd != nil
	miniProc.mu.Unlock()
	if !started {
		return 0, 0
	}
	r, err := miniRequest("stalled %d %d", from.UnixNano(), to.UnixNano())
	if err != nil {
		return 0, 0
	}
	var w, t int64
	if _, err := fmt.Sscan(r, &w, &t); err != nil {
		return 0, 0
	}
	return time.Duration(w), time.Duration(t)
}

// MiniPID returns the PID of the process that serves the "miniredis" backend's servers, 0 if
// none was started, for a test that stops it.
func MiniPID() int {
	miniProc.mu.Lock()
	defer miniProc.mu.Unlock()
	if miniProc.cmd == nil {
		return 0
	}
	return miniProc.cmd.Process.Pid
}

// MiniServer is a miniredis server of the "miniredis" backend: in the process that serves
// them, or, for a test that hooks into the server itself ([OpenInProcess]), in the test's.
type MiniServer struct {
	id   int
	port int
	m    *miniredis.Miniredis // in this process; nil if in the serving one
}

// OpenInProcess returns a "miniredis" backend whose server runs in the test's own process, for
// a test that reaches into it ([MiniServer.InProcess]); every other test uses [Open].
func OpenInProcess(tb testing.TB) *Backend {
	tb.Helper()
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.Start(); err != nil {
		tb.Fatalf("miniredis: %v", err)
	}
	s := &MiniServer{m: m}
	tb.Cleanup(s.stop)
	noteBackend(tb, Mini)
	return &Backend{Name: Mini, Mini: s, tb: tb}
}

// InProcess returns the server itself if it runs in the test's process ([OpenInProcess]), else
// nil.
func (s *MiniServer) InProcess() *miniredis.Miniredis { return s.m }

// startMini starts a miniredis server on a free port below the ephemeral range.
func startMini() (*MiniServer, error) {
	var err error
	for range 10 {
		var port int
		if port, err = freePort(false); err != nil {
			return nil, err
		}
		var id string
		if id, err = miniRequest("start %d", port); err == nil {
			n, _ := strconv.Atoi(id)
			return &MiniServer{id: n, port: port}, nil
		}
	}
	return nil, err
}

// Addr returns the server's address.
func (s *MiniServer) Addr() string {
	if s.m != nil {
		return s.m.Addr()
	}
	return "127.0.0.1:" + strconv.Itoa(s.port)
}

// Dump returns every key and value of the server, as miniredis.Dump does, for a test's
// failure message.
func (s *MiniServer) Dump() string {
	if s.m != nil {
		return s.m.Dump()
	}
	q, err := miniRequest("dump %d", s.id)
	if err != nil {
		return err.Error()
	}
	d, err := strconv.Unquote(q)
	if err != nil {
		return err.Error()
	}
	return d
}

// restart stops the server and starts it again on its port, its data kept, which drops
// every connection. The port may be taken a moment (an in-process server's is an ephemeral
// one, which a client reconnecting meanwhile can be given as its own source port): it tries
// for up to 10 s.
func (s *MiniServer) restart() error {
	if s.m != nil {
		s.m.Close()
	} else if _, err := miniRequest("close %d", s.id); err != nil {
		return err
	}
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s.m != nil {
			err = s.m.Restart()
		} else {
			_, err = miniRequest("restart %d", s.id)
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop stops the server for good.
func (s *MiniServer) stop() {
	if s.m != nil {
		s.m.Close()
		return
	}
	_, _ = miniRequest("stop %d", s.id)
}
