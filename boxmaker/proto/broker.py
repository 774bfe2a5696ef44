"""The frame kinds on brokerd's two sockets (M3). Frames as on loop.sock (proto.frame).

broker.sock (loopd's uid): loopd sends `list` (answered `tools`, final) or `call`
`{tool, arguments, session?, epoch?}` (arguments: JSON text; session: the session's id, epoch
its epoch, 0 when left out: brokerd keeps each session's taint from its own log); brokerd may
send `approval_needed {id, tool, summary}` (not final) while the owner is asked, then `result`
(a ToolResponse, final).

owner.sock (the owner's uid): the owner sends `pending` (answered `pending {calls}`), `claim
{id}` (answered `call {id, tool, summary, hash, always}`: a claimed call left unanswered when the
connection closes is denied), and `answer {id, hash, answer}` with answer yes, no or always
(answered `answered {id, answer}`). Anything wrong: `error` (final).
"""

BROKER_KINDS = frozenset({"list", "call", "tools", "approval_needed", "result", "error"})
OWNER_KINDS = frozenset({"pending", "claim", "answer", "call", "answered", "error"})
