package sim

// The simulator's "model": token i of every output is contentWords[i mod len], reasoning
// token i is reasoningWords[i mod len], and every logprob is a fixed function of i, so
// tests can compare bytes.

var contentWords = [...]string{
	" alpha", " beta", " gamma", " delta", " epsilon", " zeta", " eta", " theta",
	" iota", " kappa", " lambda", " mu", " nu", " xi", " omicron", " pi",
	" rho", " sigma", " tau", " upsilon", " phi", " chi", " psi", " omega",
}

var reasoningWords = [...]string{" Let", " me", " think", " it", " over", "."}

// TokenText returns the text of output token i (0-based) of any generation.
func TokenText(i int) string { return contentWords[i%len(contentWords)] }

func reasoningText(i int) string { return reasoningWords[i%len(reasoningWords)] }

// tokenLogprob is the logprob of sampled token i: -0.125 … -1.0, exact in binary so
// Go and Python print it alike.
func tokenLogprob(i int) float64 { return -float64(i%8+1) / 8 }

// altToken and altLogprob are the rank-th (1-based) runner-up at position i.
func altToken(i, rank int) string { return TokenText(i + rank) }

func altLogprob(i, rank int) float64 { return tokenLogprob(i) - float64(rank) - 0.5 }
