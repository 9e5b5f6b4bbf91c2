package tokenizer

import "strings"

// Message is one chat message as the template sees it.
type Message struct {
	Role, Content string
}

// ChatML is the chat template the simulator's model uses, ChatML as Qwen2/Qwen3 and many
// other models ship it (tokenizer_config.json's chat_template), without tools:
//
//	<|im_start|>{role}\n{content}<|im_end|>\n   for every message, then, with
//	<|im_start|>assistant\n                      when addGenerationPrompt is set.
//
// vLLM renders chat requests with add_generation_prompt=true by default.
func ChatML(msgs []Message, addGenerationPrompt bool) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		b.WriteString("<|im_end|>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}
