package harness

import "syscall"

// RaiseFileLimit raises RLIMIT_NOFILE (soft and, if allowed, hard) to want for this process
// and the children it starts afterwards, and returns the soft limit in force. Without the
// privilege to raise the hard limit it settles for the hard limit.
func RaiseFileLimit(want uint64) (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur >= want {
		return r.Cur, nil
	}
	nr := syscall.Rlimit{Cur: want, Max: max(r.Max, want)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nr); err == nil {
		return want, nil
	}
	nr = syscall.Rlimit{Cur: r.Max, Max: r.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nr); err != nil {
		return r.Cur, err
	}
	return r.Max, nil
}
