package harmony

import _ "embed"

// ChatTemplate is the chat template gpt-oss ships (chat_template.jinja of
// openai/gpt-oss-20b and -120b). It renders a conversation the way the
// model was trained to read it, so it stands in for a checkpoint that
// carries no template: unlike a guessed format, harmony is fixed by the
// model family.
//
//go:embed chat_template.jinja
var ChatTemplate string
