package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	json "github.com/goccy/go-json"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Command returns the "sim" command: one engine per process, or a whole fleet with
// "sim fleet". Both print one JSON line describing what they started and run until
// SIGINT or SIGTERM.
func Command() *cobra.Command {
	var o Options
	var role string
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run a vLLM-faithful engine simulator (NIXL prefill/decode, fault injection)",
		Long: "Run one simulated vLLM engine. It prints one JSON line with its name, role, URL, engine id\n" +
			"and KV endpoint, serves until SIGINT/SIGTERM, and exits cleanly. See bench/sim/README.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Role = Role(role)
			calibrateUnset(cmd.Flags(), &o)
			applyHashSeed(cmd.Flags(), &o)
			return runUntilSignal(cmd.Context(), cmd.OutOrStdout(), func() (any, func() error, error) {
				e, err := Start(o)
				if err != nil {
					return nil, nil, err
				}
				return e.Info(), e.Close, nil
			})
		},
	}
	local := cmd.Flags()
	local.StringVar(&o.Listen, "listen", "127.0.0.1:8100", "API listen address")
	local.StringVar(&role, "role", string(RoleBoth), "role: prefill, decode or both (metadata; every request is served)")
	local.StringVar(&o.Name, "name", "sim", "engine name")
	local.StringVar(&o.EngineID, "engine-id", "", "KV engine identity (default: a fresh UUID per start)")
	local.StringVar(&o.KVEndpoint, "kv-endpoint", "", "KV side-channel listen address it advertises (default: 127.0.0.1 with a free port)")
	addEngineFlags(cmd.PersistentFlags(), &o)
	cmd.AddCommand(fleetCommand(&o))
	return cmd
}

func fleetCommand(template *Options) *cobra.Command {
	var fo FleetOptions
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Run a fleet of simulated engines on free loopback ports",
		Long: "Start --prefill, --decode and --both engines (named p0…, d0…, b0…) in one process and print\n" +
			`one JSON line {"engines":[{"name","role","url","engine_id","kv_endpoint"},…]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fo.Engine = *template
			fo.Engine.Name, fo.Engine.EngineID = "", ""
			calibrateUnset(cmd.Flags(), &fo.Engine)
			applyHashSeed(cmd.Flags(), &fo.Engine)
			return runUntilSignal(cmd.Context(), cmd.OutOrStdout(), func() (any, func() error, error) {
				f, err := StartFleet(fo)
				if err != nil {
					return nil, nil, err
				}
				return map[string]any{"engines": f.Infos()}, f.Close, nil
			})
		},
	}
	cmd.Flags().IntVar(&fo.Prefill, "prefill", 1, "number of prefill engines")
	cmd.Flags().IntVar(&fo.Decode, "decode", 1, "number of decode engines")
	cmd.Flags().IntVar(&fo.Both, "both", 0, "number of both-role engines")
	return cmd
}

// calibrateUnset gives the capacity model, when --max-num-seqs turns it on, the calibrated
// step times (Calibrated) for those of --itl, --itl-per-seq and --prefill-per-token the
// command line does not set. Without the capacity model they stay 0 by default.
func calibrateUnset(fs *pflag.FlagSet, o *Options) {
	if o.MaxNumSeqs <= 0 {
		return
	}
	if !fs.Changed("itl") {
		o.ITL = Calibrated.ITL
	}
	if !fs.Changed("itl-per-seq") {
		o.ITLPerSeq = Calibrated.ITLPerSeq
	}
	if !fs.Changed("prefill-per-token") {
		o.PrefillPerToken = Calibrated.PrefillPerToken
	}
}

// addEngineFlags registers the latency, model and KV flags both commands share.
func addEngineFlags(fs *pflag.FlagSet, o *Options) {
	fs.StringSliceVar(&o.Models, "model", []string{DefaultModel}, "served model name (repeatable or comma-separated)")
	fs.IntVar(&o.MaxModelLen, "max-model-len", DefaultMaxModelLen, "context length reported and enforced")
	fs.StringVar(&o.Version, "version", DefaultVersion, "version reported by /version")
	fs.DurationVar(&o.TTFT, "ttft", 0, "time to the first token of either leg (prefill response, decode first token)")
	fs.DurationVar(&o.PrefillPerToken, "prefill-per-token", 0, "added per prompt token when the engine computes the prompt (capacity model: per uncached token in a step; default there: the calibration's, see README)")
	fs.DurationVar(&o.ITL, "itl", 0, "gap between tokens (0: as fast as possible; capacity model: the step floor, default there: the calibration's)")
	fs.IntVar(&o.Tokens, "tokens", DefaultTokens, "default output length (max_tokens caps it)")
	fs.StringVar(&o.KVLayout, "kv-layout", KVLayoutFlat, "remote_block_ids layout: flat (NIXL v2) or grouped (newest, one list per KV group)")
	fs.StringVar(&o.DescriptorExtra, "descriptor-extra", "", "raw JSON members appended to every descriptor, e.g. '\"x_future\":{\"a\":1}' (runtime fields a router must forward untouched)")
	fs.DurationVar(&o.KVLease, "kv-lease", DefaultKVLease, "how long unread blocks stay pinned")
	fs.StringVar(&o.KVLoadFailure, "kv-load-failure", KVLoadFail, "on a failed KV load: fail (HTTP 500) or recompute")
	fs.IntVar(&o.TPSize, "tp-size", 1, "tp_size advertised in descriptors")
	fs.StringVar(&o.CacheDType, "kv-cache-dtype", "auto", "KV cache dtype (cache_config_info, the KV handshake's hash)")

	// The capacity model (off while --max-num-seqs is 0).
	fs.IntVar(&o.MaxNumSeqs, "max-num-seqs", 0, "capacity model: sequences running at once, the rest queue (vLLM max_num_seqs; 0: model off, unbounded)")
	fs.IntVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", DefaultMaxNumBatchedTokens, "capacity model: token budget of one step (decodes + prefill chunks)")
	fs.DurationVar(&o.ITLPerSeq, "itl-per-seq", 0, "capacity model: added to each step per sequence in it (step = itl + itl-per-seq × seqs + prefill-per-token × prefill tokens; default with the model on: the calibration's)")
	fs.IntVar(&o.KVBlocks, "kv-blocks", DefaultKVBlocks, "KV cache size in blocks (capacity model: requests wait for blocks; kv_cache_usage_perc is relative to it)")
	fs.IntVar(&o.BlockSize, "block-size", DefaultBlockSize, "tokens (words) per KV block and prefix-cache hash")
	fs.DurationVar(&o.TransferPerBlock, "transfer-per-block", 0, "time a consumer spends per KV block it pulls from a producer")
	fs.StringVar(&o.KVEvents, "kv-events", "", "publish the prefix cache's KV events like vLLM's --kv-events-config on a ZeroMQ PUB socket bound here, e.g. tcp://127.0.0.1:5557 (port 0: a free one; a fleet needs 0); needs --max-num-seqs")
	fs.StringVar(&o.KVEventsReplay, "kv-events-replay", "", "the KV events' ROUTER replay socket, e.g. tcp://127.0.0.1:5558 (port 0: a free one)")
	fs.StringVar(&o.KVEventsTopic, "kv-events-topic", "", "the KV events' topic frame (vLLM's default: empty)")
	fs.BoolVar(&o.PromptTokensDetails, "enable-prompt-tokens-details", false, "report usage.prompt_tokens_details.cached_tokens (vLLM's flag of the same name)")
	fs.StringVar(&o.TokenizerJSON, "tokenizer", "", "a Hugging Face tokenizer.json (byte-level BPE) to tokenize with (default: the simulator's own)")
	fs.StringVar(&o.HashAlgo, "prefix-caching-hash-algo", "sha256", "block hash: sha256, sha256_cbor, xxhash or xxhash_cbor (vLLM's flag)")
	fs.String("hash-seed", "", "PYTHONHASHSEED for block hashes (default: $PYTHONHASHSEED if set, else random per engine start, as vLLM)")
	fs.StringSliceVar(&o.LoRAModules, "lora-modules", nil, "LoRA adapter names served beside the models (name or name=path, repeatable)")
	fs.IntVar(&o.MaxLoRAs, "max-loras", 0, "adapters one batch may hold (vLLM's --max-loras; default 1 with --lora-modules); turns on LoRA and /v1/load_lora_adapter")
	fs.DurationVar(&o.LoRASwap, "lora-swap", 0, "time a step takes longer when an adapter enters a GPU slot it was not in; needs --max-num-seqs")
}

// applyHashSeed sets o.HashSeed from --hash-seed, else from PYTHONHASHSEED as vLLM reads it,
// and strips "=path" from --lora-modules entries.
func applyHashSeed(fs *pflag.FlagSet, o *Options) {
	if f := fs.Lookup("hash-seed"); f != nil && f.Changed {
		seed := f.Value.String()
		o.HashSeed = &seed
	} else if seed, ok := os.LookupEnv("PYTHONHASHSEED"); ok {
		o.HashSeed = &seed
	}
	for i, m := range o.LoRAModules {
		o.LoRAModules[i], _, _ = strings.Cut(m, "=")
	}
}

// runUntilSignal starts something, prints its description as one JSON line, and
// stops it on SIGINT, SIGTERM or ctx's end.
func runUntilSignal(ctx context.Context, out io.Writer, start func() (any, func() error, error)) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	desc, closeFn, err := start()
	if err != nil {
		return err
	}
	line, err := json.Marshal(desc)
	if err == nil {
		_, err = fmt.Fprintf(out, "%s\n", line)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("sim: print description: %w", err), closeFn())
	}
	<-ctx.Done()
	return closeFn()
}
