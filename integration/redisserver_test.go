package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server the parent started for one run: on a free
// loopback port, no persistence, stopped at the end of the test. The
// store-down runs stop it (SIGSTOP, or a kill) and bring it back on the
// same port.
type redisServer struct {
	bin  string
	addr string // 127.0.0.1:PORT
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd // nil while stopped
}

// requireRedis skips the test, or fails it under RR_REQUIRE_REDIS=1, with
// why redis-server cannot run (as redis/'s tests do).
func requireRedis(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("RR_REQUIRE_REDIS") == "1" {
		tb.Fatalf("redis-server required (RR_REQUIRE_REDIS=1): %s", msg)
	}
	tb.Skipf("redis-server not available: %s (install Debian's redis-server; set RR_REQUIRE_REDIS=1 to fail instead of skipping)", msg)
}

// startRedisServer starts a redis-server for tb, stopped when tb ends.
func startRedisServer(tb testing.TB) *redisServer {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		requireRedis(tb, "%v", err)
	}
	for range 3 { // a free port can be taken between the probe and the start
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		s := &redisServer{bin: bin, port: port, addr: "127.0.0.1:" + strconv.Itoa(port)}
		if err = s.launch(); err == nil {
			tb.Cleanup(s.stop)
			return s
		}
		tb.Logf("redis-server on %s: %v", s.addr, err)
	}
	tb.Fatal("redis-server did not start in 3 tries")
	return nil
}

// launch starts redis-server on s's port and waits for its PONG.
func (s *redisServer) launch() error {
	cmd := exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "yes")
	cmd.Dir = os.TempDir()
	if err := cmd.Start(); err != nil {
		return err
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("no answer on %s within 5 s: %v", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills redis-server (a stopped one too) and waits for it.
func (s *redisServer) stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a SIGSTOPped process dies of SIGKILL too; this only tidies
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// signal sends sig to redis-server.
func (s *redisServer) signal(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		tb.Fatalf("redis-server on %s is not running", s.addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		tb.Fatal(err)
	}
}
