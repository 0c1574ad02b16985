"""The embedded local server: training API, chat completion and trace service on one port."""
