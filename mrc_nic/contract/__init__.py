"""The contract between clients and the lab's services: what goes over a socket.

- framing: how an operation is declared (typed request and reply), validated
  and written on the wire (one JSON object per line);
- daemonops: the host daemon's own operations (ping, qp_list, ev_set), and
  the list of all it serves; appops: the verbs API's setup operations;
  ctlops: the OCP controller's (mrc_ctl.h); eventops: the lab's event log's;
- enums: mrc_ctl.h's enums (profile state, EV format and mode, EV state);
- shares: a session's shares of a host (app_hello, the topology's [tenants]);
- opsdoc: docs/daemon.md's lists of operations, written from the declarations.

It imports nothing of mrc_nic but mrc_nic.errors: clients (mrc_nic.verbs,
mrc_nic.cli) and servers (mrc_nic.transport, mrc_nic.observe) stand on it.
"""
