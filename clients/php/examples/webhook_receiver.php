<?php
// A webhook endpoint: verifies the signature, checks the event is this client's, deduplicates on the
// event ID, records the event.
//   LEITSTAND_WEBHOOK_SECRET=… LEITSTAND_CLIENT=php-core LEITSTAND_EVENTS_DIR=/var/lib/core/leitstand-events \
//     php -S 127.0.0.1:8090 examples/webhook_receiver.php
declare(strict_types=1);

require __DIR__ . '/../autoload.php';

if ($_SERVER['REQUEST_METHOD'] !== 'POST') {
    http_response_code(405);
    exit;
}
$event = Leitstand\Webhook::receive((string) getenv('LEITSTAND_WEBHOOK_SECRET'));  // 401 and exit when invalid

// A verified delivery is Leitstand's, but not necessarily about this client's job (a shared secret, the
// global webhook): act only on one's own. Another client's event is refused, so Leitstand's operators
// see the misrouted deliveries fail instead of this core acting on them.
$own = (string) getenv('LEITSTAND_CLIENT');
if ($own === '' || ($event['client'] ?? null) !== $own) {
    http_response_code(422);
    header('Content-Type: text/plain');
    echo $own === '' ? "LEITSTAND_CLIENT is not set: whose events to accept is not known\n"
                     : "the event is not about a job of client $own\n";
    exit;
}

// A delivery may come more than once (a retry after a lost answer): the event ID decides.
$directory = getenv('LEITSTAND_EVENTS_DIR') ?: sys_get_temp_dir() . '/leitstand-events';
if (!is_dir($directory)) {
    mkdir($directory, 0700, true);
}
$file = $directory . '/' . preg_replace('/[^A-Za-z0-9_]/', '', (string) $event['id']) . '.json';
$handle = @fopen($file, 'x');  // 'x': fails when the event was recorded before
if ($handle !== false) {
    // The trace the job was submitted in: pass it to OpenTelemetry's propagator (extract) to continue it.
    $event['trace_context'] = Leitstand\Webhook::traceContext();
    fwrite($handle, json_encode($event, JSON_UNESCAPED_SLASHES | JSON_PRETTY_PRINT));
    fclose($handle);
    // Here the core would act on it: $event['type'] is job.done, job.dead, job.ready_for_review or
    // recheck_plan.ended; $event['job'] names the job (id, type, idempotency_key, correlation_id, state).
}
http_response_code(204);  // any 2xx acknowledges; anything else is delivered again later
