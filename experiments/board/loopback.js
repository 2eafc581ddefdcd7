// Preloaded into Omniboard (`node -r loopback.js`): its server has no option
// for the address it binds, and would listen on every interface. Any
// `listen(port, ...)` without a host gets 127.0.0.1.
'use strict';
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  const isPort = typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first));
  if (isPort && typeof args[1] !== 'string') {
    args.splice(1, 0, '127.0.0.1');
  } else if (first && typeof first === 'object' && first.port !== undefined && !first.host) {
    args[0] = Object.assign({}, first, { host: '127.0.0.1' });
  }
  return listen.apply(this, args);
};
