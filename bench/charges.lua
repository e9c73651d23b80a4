-- wrk script for bench/run: POST /charges as the account whose key bench/run
-- created and exported as CHARGES_API_KEY.
--
--   wrk ... -s bench/charges.lua URL -- MODE PHASE [REPLAY_KEYS]
--
-- MODE   fresh   a new Idempotency-Key on every request (first requests)
--        naive   no Idempotency-Key at all
--        replay  cycle over REPLAY_KEYS keys shared by all threads: after the
--                warm-up has completed them, every request is a replay
--        health  GET /healthz: what the server's HTTP costs with no database
--                call, no body and no key (phase h)
--        ready   GET /readyz: the same plus one pooled database call, a
--                `SELECT 1` on the blocking thread pool (phase r)
--        refund  POST /charges/{id}/refunds {"amount": 1} with a new key on
--                every request, over the charges whose ids are the lines of
--                the file named by the environment's BENCH_REFUND_CHARGES
--                (spread so that concurrent refunds rarely share a charge)
-- PHASE  a small integer, unique per phase of one run, so the keys of two
--        phases never collide
--
-- A fresh key looks like a client's UUIDv4 (random, so inserts spread over
-- the whole unique index as real keys do) and is unique by construction: its
-- last group encodes the phase, the wrk thread and a per-thread counter.
--
-- done() prints one line "BENCH_JSON {...}" that bench/run parses.

local body = '{"amount":1000,"currency":"jpy","description":"bench"}'
local headers = {
  ["Authorization"] = "Bearer " .. os.getenv("CHARGES_API_KEY"),
  ["Content-Type"] = "application/json",
}

local refund_body = '{"amount":1}'
local refund_charges = {}

local threads_seen = 0

function setup(thread)
  threads_seen = threads_seen + 1
  thread:set("tid", threads_seen)
end

local mode, phase, replay_keys = "fresh", 0, 256
local counter = 0

function init(args)
  mode = args[1] or "fresh"
  phase = tonumber(args[2] or "0") or 0
  replay_keys = tonumber(args[3] or "256") or 256
  if mode ~= "fresh" and mode ~= "naive" and mode ~= "replay" and mode ~= "refund"
      and mode ~= "health" and mode ~= "ready" then
    error("charges.lua: unknown mode " .. tostring(mode))
  end
  if mode == "refund" then
    for line in io.lines(os.getenv("BENCH_REFUND_CHARGES")) do
      refund_charges[#refund_charges + 1] = line
    end
    if #refund_charges == 0 then
      error("charges.lua: no charges to refund in " .. tostring(os.getenv("BENCH_REFUND_CHARGES")))
    end
  end
  math.randomseed(os.time() * 1000 + (tid or 0) * 7919 + phase)
end

local function r16()
  return math.random(0, 65535)
end

local function fresh_key()
  -- xxxxxxxx-xxxx-4PPP-yTTT-CCCCCCCCCCCC (hex): P phase, T thread, C counter
  return string.format('"%04x%04x-%04x-4%03x-%x%03x-%012x"',
    r16(), r16(), r16(), phase % 4096,
    8 + math.random(0, 3), (tid or 0) % 4096, counter)
end

function request()
  counter = counter + 1
  if mode == "health" then
    return wrk.format("GET", "/healthz")
  elseif mode == "ready" then
    return wrk.format("GET", "/readyz")
  elseif mode == "naive" then
    headers["Idempotency-Key"] = nil
  elseif mode == "refund" then
    headers["Idempotency-Key"] = fresh_key()
    local charge = refund_charges[math.random(1, #refund_charges)]
    return wrk.format("POST", "/charges/" .. charge .. "/refunds", headers, refund_body)
  elseif mode == "fresh" then
    headers["Idempotency-Key"] = fresh_key()
  else
    -- Same keys in every thread: key number (counter mod N).
    headers["Idempotency-Key"] = string.format('"bench-replay-%d-%d"', phase, counter % replay_keys)
  end
  return wrk.format("POST", "/charges", headers, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d,"mean":%.1f}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
