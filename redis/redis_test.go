package rrredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server the tests started: on a free loopback port,
// with no persistence, stopped when the test binary's tests end.
type server struct {
	addr string
	cmd  *exec.Cmd
}

var (
	serverOnce sync.Once
	theServer  *server
	serverErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if theServer != nil {
		theServer.stop()
	}
	os.Exit(code)
}

// requireRedis skips the test, or fails it under RR_REQUIRE_REDIS=1, with
// why redis-server cannot run.
func requireRedis(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("RR_REQUIRE_REDIS") == "1" {
		t.Fatalf("redis-server required (RR_REQUIRE_REDIS=1): %s", msg)
	}
	t.Skipf("redis-server not available: %s (install Debian's redis-server; set RR_REQUIRE_REDIS=1 to fail instead of skipping)", msg)
}

// startRedis returns the binary's redis-server, starting it on first use.
func startRedis(t testing.TB) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		requireRedis(t, "%v", err)
	}
	serverOnce.Do(func() {
		for range 3 { // a free port can be taken between the probe and the start
			theServer, serverErr = launch(bin)
			if serverErr == nil {
				return
			}
		}
	})
	if serverErr != nil {
		t.Fatalf("start redis-server: %v", serverErr)
	}
	return theServer
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func launch(bin string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "yes")
	cmd.Dir = os.TempDir()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("no answer on %s within 5 s: %v", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// client returns a client of the tests' redis-server, closed at the end
// of t.
func client(t testing.TB) *redis.Client {
	t.Helper()
	s := startRedis(t)
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	t.Cleanup(func() { c.Close() })
	return c
}
