//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// The tests below run distsync as an operator does: typed into an interactive bash, with job
// control, in a pseudo-terminal. They would fail if the command's process group did not get
// the terminal (a prompt would stop it with SIGTTIN, and Ctrl-C would not reach it), or if
// distsync did not follow the command's job-control stops.

// shell is an interactive bash in a pseudo-terminal.
type shell struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  *os.File
	mu   sync.Mutex
	out  bytes.Buffer // what the terminal showed
	mark int          // expect looks from here
}

func startShell(t *testing.T) *shell {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	s := &shell{t: t}
	s.cmd = exec.Command("bash", "--norc", "--noprofile", "-i")
	s.cmd.Env = append(cliEnv(), "PS1=$ ", "TERM=dumb", "HISTFILE=/dev/null")
	f, err := pty.Start(s.cmd) // a session of its own, the pty its controlling terminal
	if err != nil {
		t.Fatalf("start bash in a pty: %v", err)
	}
	s.pty = f
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			s.mu.Lock()
			s.out.Write(buf[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		killSession(s.cmd.Process.Pid)
		_ = s.cmd.Wait()
		f.Close()
		<-done
	})
	s.expect(`\$ `)
	return s
}

// killSession kills every process of the session sid: bash and what it started.
func killSession(sid int) {
	for range 10 {
		pids := sessionPIDs(sid)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionPIDs lists the live processes of session sid (from /proc).
func sessionPIDs(sid int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := procStat(pid)
		if ok && st.session == sid && st.state != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

type stat struct {
	state   string
	session int
}

// procStat reads a process's state and session from /proc/PID/stat.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(s[i+1:]) // state ppid pgrp session ...
	if len(f) < 4 {
		return stat{}, false
	}
	sid, _ := strconv.Atoi(f[3])
	return stat{state: f[0], session: sid}, true
}

// send types s.
func (s *shell) send(text string) {
	s.t.Helper()
	if _, err := s.pty.Write([]byte(text)); err != nil {
		s.t.Fatalf("write to the terminal: %v", err)
	}
}

// expect waits until the terminal shows what matches re after what earlier expects matched,
// and returns the match.
func (s *shell) expect(re string) []string {
	s.t.Helper()
	rx := regexp.MustCompile(re)
	var m []int
	ok := eventually(cliLimit, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if m = rx.FindSubmatchIndex(s.out.Bytes()[s.mark:]); m == nil {
			return false
		}
		return true
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		s.t.Fatalf("the terminal did not show %q within %v; it shows:\n%s", re, cliLimit, s.out.Bytes()[s.mark:])
	}
	b := s.out.Bytes()[s.mark:]
	var groups []string
	for i := 0; i < len(m); i += 2 {
		groups = append(groups, string(b[m[i]:m[i+1]]))
	}
	s.mark += m[1]
	return groups
}

// eventually reports whether cond became true within limit, looking every 10 ms.
func eventually(limit time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(limit); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// prompter is the command line of a command that prints its parent's pid (distsync's), asks
// "Proceed? " and prints what it read. The typed line shows none of what it prints: its
// echo cannot satisfy an expect.
const prompter = `sh -c 'echo "pp=$PPID."; printf "\120roceed? "; read a; echo "answer=$a."'`

// ttySetup returns a shell and the start of a distsync command line with the test's Redis
// and prefix.
func ttySetup(t *testing.T) (*shell, string, func() bool) {
	bin, common, prefix, b, _ := cliSetup(t)
	sh := startShell(t)
	held := func() bool { return keyExists(t, b, prefix+"{tty}:mutex") }
	return sh, bin + " lock " + strings.Join(common, " "), held
}

// A command that reads the terminal can: its group has the terminal while it runs.
func TestCommandCanReadTheTerminal(t *testing.T) {
	t.Parallel()
	sh, lock, held := ttySetup(t)
	sh.send(lock + " tty -- " + prompter + "\n")
	sh.expect(`Proceed\? `)
	if !held() {
		t.Error("the lock is not held while the command runs")
	}
	sh.send("yes\n")
	sh.expect(`answer=yes\.`)
	sh.send("echo status=$?.\n")
	sh.expect(`status=0\.`)
	if held() {
		t.Error("the lock is held after distsync exited")
	}
}

// Ctrl-C at the prompt ends the command, and distsync, which releases the lock.
func TestCtrlCEndsACommandAtItsPrompt(t *testing.T) {
	t.Parallel()
	sh, lock, held := ttySetup(t)
	sh.send(lock + " tty -- " + prompter + "\n")
	sh.expect(`Proceed\? `)
	sh.send("\x03")
	sh.expect(`\$ `) // typed before the prompt, the next line could go to the dying command
	sh.send("echo status=$?.\n")
	sh.expect(`status=130\.`)
	if held() {
		t.Error("the lock is held after distsync exited")
	}
}

// kill -TERM to distsync ends a command that waits at its prompt, and the lock is freed.
func TestTermToDistsyncEndsACommandAtItsPrompt(t *testing.T) {
	t.Parallel()
	sh, lock, held := ttySetup(t)
	sh.send(lock + " tty -- " + prompter + "\n")
	pid, _ := strconv.Atoi(sh.expect(`pp=(\d+)\.`)[1])
	sh.expect(`Proceed\? `)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sh.expect(`\$ `)
	sh.send("echo status=$?.\n")
	sh.expect(`status=143\.`)
	if held() {
		t.Error("the lock is held after distsync exited")
	}
}

// Ctrl-Z stops the command and distsync: the shell gets the terminal back, and fg resumes
// both, the command with the terminal.
func TestCtrlZStopsTheJobAndFgResumesIt(t *testing.T) {
	t.Parallel()
	sh, lock, held := ttySetup(t)
	sh.send(lock + " --ttl 30s tty -- " + prompter + "\n")
	pid, _ := strconv.Atoi(sh.expect(`pp=(\d+)\.`)[1])
	sh.expect(`Proceed\? `)
	sh.send("\x1a")
	sh.expect(`Stopped`)
	if st, _ := procStat(pid); st.state != "T" {
		t.Errorf("distsync's state is %q after Ctrl-Z, want T (stopped)", st.state)
	}
	sh.send("echo shell=$((6*7)).\n") // the shell has the terminal
	sh.expect(`shell=42\.`)
	sh.send("fg\n")
	sh.expect(`fg\r?\n`)
	sh.send("yes\n")
	sh.expect(`answer=yes\.`)
	sh.send("echo status=$?.\n")
	sh.expect(`status=0\.`)
	if held() {
		t.Error("the lock is held after distsync exited")
	}
}

// Started in the background, a command that reads the terminal stops, distsync with it, and
// the shell says so; fg gives it the terminal.
func TestBackgroundReadStopsTheJobUntilFg(t *testing.T) {
	t.Parallel()
	sh, lock, _ := ttySetup(t)
	// set -b: bash reports a background job's change of state at once, not only before its
	// next prompt (an Enter typed before distsync stopped would let the report wait for the
	// next one).
	sh.send("set -b\n")
	sh.expect(`\$ `)
	sh.send(lock + " --ttl 30s tty -- " + prompter + " &\n")
	sh.expect(`Proceed\? `)
	sh.expect(`Stopped`)
	sh.send("fg\n")
	sh.expect(`fg\r?\n`)
	sh.send("yes\n")
	sh.expect(`answer=yes\.`)
	sh.send("echo status=$?.\n")
	sh.expect(`status=0\.`)
}

// In a script (a job of which distsync is a part, not the leader), the command shares the
// script's terminal: its prompt works, and Ctrl-C ends the whole script, as it would
// without distsync (the script's "after" is never printed).
func TestCtrlCInAScriptEndsTheScript(t *testing.T) {
	t.Parallel()
	sh, lock, held := ttySetup(t)
	script := lock + ` tty -- ` + prompter + `; echo "af""ter=$?."`
	sh.send("sh -c '" + strings.ReplaceAll(script, "'", `'\''`) + "'\n")
	sh.expect(`Proceed\? `)
	sh.send("yes\n")
	sh.expect(`answer=yes\.`)
	sh.expect(`after=0\.`)
	sh.expect(`\$ `)
	sh.send("sh -c '" + strings.ReplaceAll(script, "'", `'\''`) + "'\n")
	sh.expect(`Proceed\? `)
	sh.send("\x03")
	sh.expect(`\$ `)
	sh.send("echo status=$?.\n")
	got := sh.expect(`status=(\d+)\.`)
	if got[1] != "130" {
		t.Errorf("the script's status after Ctrl-C: %s, want 130 (killed by SIGINT)", got[1])
	}
	sh.mu.Lock()
	after := strings.Contains(sh.out.String(), "after=130")
	sh.mu.Unlock()
	if after {
		t.Error("the script went on after Ctrl-C")
	}
	if held() {
		t.Error("the lock is held after distsync exited")
	}
}
