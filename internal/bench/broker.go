package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// broker is the in-memory Kafka broker run as a child process
// (`outbox-relay fake-kafka`), so that its CPU and memory are its own.
type broker struct {
	cmd  *exec.Cmd
	addr string
}

func startBroker(partitions int) (*broker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "fake-kafka", "--topics", topic+","+config.DefaultProgressTopic, "--partitions", strconv.Itoa(partitions))
	cmd.Stderr = os.Stderr
	// The broker keeps every message in memory: no soft limit for it.
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=off", "GOGC=100")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("start broker: it said %q (%v)", line, err)
	}
	return &broker{cmd: cmd, addr: addr}, nil
}

// cpu is the broker process's CPU time so far.
func (b *broker) cpu() time.Duration { return procCPU(b.cmd.Process.Pid) }

// rss is the broker's resident memory now, in bytes.
func (b *broker) rss() int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func (b *broker) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
}
