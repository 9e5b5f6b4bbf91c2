package config

// MaxDataParallelSize bounds engines[].data_parallel_size: more ranks than any one API server
// fronts in practice, few enough that each rank's prefix-index slot and KV event feed stay cheap.
const MaxDataParallelSize = 256

// dataParallelSize checks engines[].data_parallel_size: 0 (read the ranks from the engine's
// metrics), 1 (one rank: no rank header is ever sent) or a rank count.
func (ck *checker) dataParallelSize(path string, n int) {
	if n < 0 || n > MaxDataParallelSize {
		ck.fail(path, "%d is not allowed; want 0 (read from the engine's metrics), 1 or a rank count up to %d", n, MaxDataParallelSize)
	}
}
