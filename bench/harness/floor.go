package harness

import (
	"io"
	"net"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Floor is what the machine itself charges for the work a relay cannot avoid: moving one
// small event through a loopback TCP connection. Per relayed token a router pays at least one
// such write and read; on a virtual machine with costly system calls this floor can sit
// above a per-token CPU target.
type Floor struct {
	// Syscall is the CPU of the cheapest system call (getppid).
	Syscall time.Duration
	// WriteRead is the CPU of writing a 200-byte event to a loopback TCP socket and reading
	// it from the other end, with the data already there (no waiting).
	WriteRead time.Duration
	// Relay is the CPU per event of a goroutine that waits for each event, reads it and
	// writes it on (an echo ping-pong, halved): read + write + one netpoll wake-up.
	Relay time.Duration
}

// MeasureFloor measures the floor in this process (call it while nothing else runs here).
func MeasureFloor() (Floor, error) {
	var f Floor
	a, b, err := loopbackPair()
	if err != nil {
		return f, err
	}
	defer a.Close()
	defer b.Close()
	msg := make([]byte, 200)
	buf := make([]byte, 4096)

	const n = 20000
	f.Syscall = threadCPU(n, func() { syscall.Getppid() })
	f.WriteRead = threadCPU(n, func() {
		_, _ = a.Write(msg)
		_, _ = io.ReadFull(b, buf[:len(msg)])
	})

	done := make(chan struct{})
	go func() {
		defer close(done)
		eb := make([]byte, 4096)
		for {
			k, err := b.Read(eb)
			if err != nil {
				return
			}
			if _, err := b.Write(eb[:k]); err != nil {
				return
			}
		}
	}()
	c0 := processCPU()
	for range n {
		_, _ = a.Write(msg)
		if _, err := io.ReadFull(a, buf[:len(msg)]); err != nil {
			return f, err
		}
	}
	f.Relay = (processCPU() - c0) / (2 * n) // two sides each read, write and wake per round trip
	a.Close()
	<-done
	return f, nil
}

func loopbackPair() (net.Conn, net.Conn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	b := <-accepted
	if b == nil {
		a.Close()
		return nil, nil, io.ErrUnexpectedEOF
	}
	return a, b, nil
}

// minCPU is the least CPU a measurement accumulates before it divides: the CPU clocks count
// nanoseconds, but a scheduler tick on some kernels credits time in coarser steps, and a cheap
// call repeated a fixed number of times could otherwise measure as zero.
const minCPU = 20 * time.Millisecond

// threadCPU runs fn in batches of n on one locked thread until the thread has used at least
// minCPU (or a few seconds passed), and returns its CPU per call.
func threadCPU(n int, fn func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, calls := threadClock(), 0
	for stop := time.Now().Add(5 * time.Second); ; {
		for range n {
			fn()
		}
		calls += n
		if threadClock()-c0 >= minCPU || time.Now().After(stop) {
			break
		}
	}
	return (threadClock() - c0) / time.Duration(calls)
}

// threadClock is the CPU the calling thread has used, to the nanosecond.
func threadClock() time.Duration { return cpuClock(unix.CLOCK_THREAD_CPUTIME_ID) }

// processCPU is the CPU the process has used, to the nanosecond.
func processCPU() time.Duration { return cpuClock(unix.CLOCK_PROCESS_CPUTIME_ID) }

func cpuClock(id int32) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		var ru syscall.Rusage // no CPU clock: fall back to the coarser rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return time.Duration(ts.Nano())
}
