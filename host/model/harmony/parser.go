package harmony

import (
	"encoding/json"
	"strings"
)

// Harmony's special tokens, as their texts.
const (
	Start     = "<|start|>"
	End       = "<|end|>"
	Message   = "<|message|>"
	Channel   = "<|channel|>"
	Constrain = "<|constrain|>"
	Return    = "<|return|>"
	Call      = "<|call|>"
)

// Tokens are the special tokens a Parser reads.
var Tokens = []string{Start, End, Message, Channel, Constrain, Return, Call}

// maxHeader bounds a header: past it, the text is not a header (a model
// writing plain text) and is read as a body.
const maxHeader = 256

// FunctionCall is a message the model addressed to a tool.
type FunctionCall struct {
	// Name is the recipient without the "functions." namespace.
	Name string
	// Args is the message body, trimmed: JSON when the model kept to the
	// tool's <|constrain|>json.
	Args string
}

// Delta is what one Push or End read.
type Delta struct {
	Reasoning string
	Content   string
	Calls     []FunctionCall
	// Done: the turn ended (<|return|>, <|call|>, or <|end|> after a
	// final message).
	Done bool
}

// route is where a body's text goes.
type route uint8

const (
	toReasoning route = iota
	toContent
	toCall
)

type state uint8

const (
	inHeader state = iota
	inBody
	done
)

// Parser reads one generated harmony turn. The zero value is not ready:
// use NewParser. A Parser is not safe for concurrent use.
type Parser struct {
	buf        string // unread text (a possible marker prefix)
	st         state
	expectRole bool            // the header starts with a role (after <|start|>)
	header     strings.Builder // the header so far, markers included
	route      route
	final      bool // the body is a final message
	recipient  string
	call       strings.Builder // a call's body
}

// NewParser returns a parser for the text generated after the prompt's
// "<|start|>assistant".
func NewParser() *Parser { return &Parser{} }

// Push reads text and returns what it completed.
func (p *Parser) Push(text string) Delta {
	var d Delta
	if p.st == done {
		return d
	}
	p.buf += text
	p.read(&d, false)
	return d
}

// End reads what is left when generation stopped (an EOG token the server
// did not spell out, max_tokens, a stop string).
func (p *Parser) End() Delta {
	var d Delta
	if p.st == done {
		return d
	}
	p.read(&d, true)
	switch p.st {
	case inHeader:
		p.malformed(&d, false)
	case inBody:
		p.endBody(&d, true)
	}
	p.st = done
	return d
}

// read consumes p.buf up to a possible marker prefix (all of it when eof).
func (p *Parser) read(d *Delta, eof bool) {
	for p.st != done && p.buf != "" {
		i := strings.Index(p.buf, "<|")
		var marker string
		if i >= 0 {
			for _, m := range Tokens {
				if strings.HasPrefix(p.buf[i:], m) {
					marker = m
					break
				}
			}
		}
		if marker == "" {
			// Text up to the next "<|" that may still become a marker.
			n := len(p.buf)
			if i < 0 && !eof && strings.HasSuffix(p.buf, "<") {
				n-- // may begin "<|"
			}
			if i >= 0 {
				if !eof && couldBeMarker(p.buf[i:]) {
					n = i
				} else {
					n = i + 2 // a "<|" that is no marker is text
				}
			}
			if n == 0 {
				return
			}
			p.text(d, p.buf[:n])
			p.buf = p.buf[n:]
			continue
		}
		if i > 0 {
			p.text(d, p.buf[:i])
		}
		p.buf = p.buf[i+len(marker):]
		p.marker(d, marker)
	}
}

// couldBeMarker reports whether s (starting "<|") is a proper prefix of a
// marker.
func couldBeMarker(s string) bool {
	for _, m := range Tokens {
		if len(s) < len(m) && strings.HasPrefix(m, s) {
			return true
		}
	}
	return false
}

// text handles plain text in the current state.
func (p *Parser) text(d *Delta, s string) {
	switch p.st {
	case inBody:
		p.emit(d, s)
	case inHeader:
		if p.header.Len() == 0 && !p.expectRole && s[0] != ' ' {
			// No header: the model answers in plain text.
			p.startBody(toContent, true)
			p.emit(d, s)
			return
		}
		// The header overflows at its (maxHeader+1)-th byte wherever the
		// text was split: cut there, read the header as malformed and
		// the rest as its body.
		if over := p.header.Len() + len(s) - (maxHeader + 1); over >= 0 {
			k := max(len(s)-over, 0)
			p.header.WriteString(s[:k])
			p.malformed(d, true)
			if k < len(s) {
				p.text(d, s[k:])
			}
			return
		}
		p.header.WriteString(s)
	}
}

func (p *Parser) emit(d *Delta, s string) {
	switch p.route {
	case toReasoning:
		d.Reasoning += s
	case toContent:
		d.Content += s
	case toCall:
		p.call.WriteString(s)
	}
}

// marker handles a special token in the current state.
func (p *Parser) marker(d *Delta, m string) {
	if p.st == inHeader {
		switch m {
		case Message:
			p.openBody()
			return
		case Channel, Constrain:
			p.header.WriteString(m)
			return
		}
		// A terminator or a new message before <|message|>.
		p.malformed(d, false)
	}
	switch m {
	case Channel, Message, Constrain:
		return // stray inside a body: dropped
	case Start:
		p.endBody(d, false)
		p.st, p.expectRole = inHeader, true
	case End:
		final := p.final
		p.endBody(d, false)
		p.st, p.expectRole = inHeader, false
		if final {
			p.st, d.Done = done, true
		}
	case Return, Call:
		p.endBody(d, false)
		p.st, d.Done = done, true
	}
}

// openBody reads the finished header: role, channel, recipient.
func (p *Parser) openBody() {
	h := p.header.String()
	p.header.Reset()
	role := "assistant"
	if p.expectRole {
		role, h = cutWord(h)
	}
	channel, recipient := "", ""
	if strings.HasPrefix(role, "assistant") && strings.Contains(role, " to=") {
		role, recipient, _ = strings.Cut(role, " to=")
	}
	fields := strings.Fields(strings.NewReplacer(Channel, " "+Channel+" ", Constrain, " "+Constrain+" ").Replace(h))
	for k, f := range fields {
		switch {
		case f == Channel && k+1 < len(fields):
			channel = fields[k+1]
		case strings.HasPrefix(f, "to="):
			recipient = strings.TrimPrefix(f, "to=")
		}
	}
	switch {
	case role != "assistant":
		p.startBody(toReasoning, false)
	case recipient != "" && recipient != "assistant":
		p.startBody(toCall, false)
		p.recipient = recipient
	case channel == "final", channel == "":
		p.startBody(toContent, true)
	case channel == "commentary":
		p.startBody(toContent, false)
	default: // analysis, and channels harmony does not define
		p.startBody(toReasoning, false)
	}
}

// cutWord splits a role from the rest of a header: the role ends at a
// marker (a " to=" stays with it).
func cutWord(h string) (string, string) {
	if i := strings.Index(h, "<|"); i >= 0 {
		return strings.TrimSpace(h[:i]), h[i:]
	}
	return strings.TrimSpace(h), ""
}

func (p *Parser) startBody(r route, final bool) {
	p.st, p.route, p.final = inBody, r, final
	p.recipient = ""
	p.call.Reset()
}

// malformed reads a header that never reached <|message|> as a body of
// the channel it named, or of the final channel when it named none.
func (p *Parser) malformed(d *Delta, overflow bool) {
	h := p.header.String()
	p.header.Reset()
	r, final := toContent, h != "" // an empty one (<|end|><|end|>) ends no answer
	if i := strings.Index(h, Channel); i >= 0 {
		after := strings.TrimLeft(h[i+len(Channel):], " ")
		ch, rest := cutWord(after)
		if j := strings.IndexByte(ch, ' '); j >= 0 {
			ch, rest = ch[:j], ch[j:]+rest
		}
		if overflow && len(ch) == len(after) {
			// The channel name runs on past maxHeader: no channel, only text
			// (how the header was split must not change where it goes).
			ch, rest = "final", after
		}
		h = rest
		switch ch {
		case "final":
		case "commentary":
			final = false
		default:
			r, final = toReasoning, false
		}
	}
	p.startBody(r, final)
	h = strings.NewReplacer(Channel, "", Constrain, "").Replace(h)
	if strings.TrimSpace(h) != "" {
		p.emit(d, strings.TrimLeft(h, " "))
	}
}

// endBody closes the body: a call becomes a FunctionCall. cut: generation
// stopped inside it, so a call counts only if its body is complete JSON
// (else its text is given back as content).
func (p *Parser) endBody(d *Delta, cut bool) {
	if p.st != inBody || p.route != toCall {
		return
	}
	args := strings.TrimSpace(p.call.String())
	p.call.Reset()
	if cut && !json.Valid([]byte(args)) {
		d.Content += args
		return
	}
	d.Calls = append(d.Calls, FunctionCall{Name: strings.TrimPrefix(p.recipient, "functions."), Args: args})
}
