"""Phone calls through Twilio: the voice webhook's TwiML and request signatures (`voice`), the Media Streams
protocol, Sans-I/O (`protocol`), and the stream as a session's socket (`edge`). See docs/telephony.md."""
