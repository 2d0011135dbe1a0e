package toolloop

// step is what the loop does after a round (or after its server calls ran).
type step uint8

const (
	stepEnd       step = iota // the response ends: finish and reason are set
	stepRunTools              // run the round's server calls, then decide again with ran set
	stepNextRound             // append the turn and call the model again
)

// roundOutcome is what a round produced, as far as its end is concerned.
type roundOutcome struct {
	final    bool   // the forced final call (tool_choice "none")
	server   int    // server calls in the round
	client   int    // client calls in the round
	required bool   // plan.choice == choiceRequired
	ran      bool   // the server calls have run
	stopReq  bool   // a server result asked to stop (only with ran)
	upstream string // the upstream's finish_reason ("" when it sent none)
	// spent: the rounds so far used the request's whole output cap
	// (max_completion_tokens or max_tokens), which bounds the answer, not
	// each round: no round may follow.
	spent bool
}

// decision is the end-of-round rule's answer.
type decision struct {
	next   step
	finish string // the client's finish_reason (with stepEnd)
	reason string // session.end's stop reason (with stepEnd)
	// resultsAnswer: the server results' text is the answer (tool_choice
	// required, or a stop result).
	resultsAnswer bool
	// saveHidden: the round hands client calls out; the hidden server part
	// of the response (earlier server-only rounds, this round's server
	// calls) is kept for the client's follow-up.
	saveHidden bool
}

// decide is the one end-of-round rule both loops follow (docs/wire.md
// rule 12): "tool_calls" when client calls were shown and the upstream
// finished the round, and the upstream's own reason otherwise ("length",
// "content_filter"), with "tool_calls" and a missing reason turned into
// "stop". A forced final round never runs its server calls (when it made
// some, the budget ended the answer: "length"), and neither
// does a round the upstream cut: its last call's arguments may be cut off,
// and another round would most likely be cut again, so the answer ends
// there with the upstream's reason. Pure: the stream and the JSON answer
// call it with the same outcome and so cannot disagree.
func decide(o roundOutcome) decision {
	answer := o.upstream
	if answer == "" || answer == "tool_calls" {
		answer = "stop"
	}
	cut := o.upstream == "length" || o.upstream == "content_filter"
	switch {
	case o.final || o.server == 0 || cut:
		switch {
		case o.client > 0 && cut:
			return decision{finish: answer, reason: "client_tool_calls"}
		case o.client > 0:
			// Client calls shown (a forced final round's server calls
			// dropped): the server-only rounds before them, if any, are
			// kept for the follow-up as a mixed turn's are, or the
			// follow-up would start the task over and run them again.
			return decision{finish: "tool_calls", reason: "client_tool_calls", saveHidden: true}
		case o.server > 0 && cut && !o.final:
			return decision{finish: answer, reason: "cut"}
		case o.server > 0 && !cut:
			// The forced final round still called server tools (a model
			// that ignores tool_choice "none"): the loop's budget ended the
			// answer, which may hold no text. "length" says a limit ended
			// it, where "stop" would call an empty answer complete.
			return decision{finish: "length", reason: "answer"}
		}
		return decision{finish: answer, reason: "answer"}
	case !o.ran && o.spent && o.client == 0 && !o.required:
		// The output cap is spent and only another round could use the
		// server calls' results: they are not run (as a cut round's), and
		// the answer ends as the cap ends one.
		return decision{finish: "length", reason: "max_tokens"}
	case !o.ran:
		return decision{next: stepRunTools}
	case o.client > 0:
		return decision{finish: "tool_calls", reason: "client_tool_calls", saveHidden: true}
	case o.required:
		return decision{finish: "stop", reason: "tool_choice", resultsAnswer: true}
	case o.stopReq:
		return decision{finish: "stop", reason: "tool_stop", resultsAnswer: true}
	}
	return decision{next: stepNextRound}
}
