<?php

declare(strict_types=1);

namespace Leitstand\Tests;

use Leitstand\Client;
use Leitstand\NetworkError;
use PHPUnit\Framework\TestCase;

/**
 * Which calls the client repeats, against PHP's built-in server answering every request 503 and
 * counting them: reads are retried, an action that is not repeatable (hold, resume, cancel, a plan's
 * decision) is sent once — it may have been applied before the answer was lost.
 */
final class RetryTest extends TestCase
{
    private static $server;
    private static string $counter;
    private static int $port;

    public static function setUpBeforeClass(): void
    {
        self::$counter = tempnam(sys_get_temp_dir(), 'leitstand-retry-');
        $router = tempnam(sys_get_temp_dir(), 'leitstand-router-') . '.php';
        file_put_contents($router, '<?php file_put_contents(' . var_export(self::$counter, true)
            . ', "x", FILE_APPEND | LOCK_EX); http_response_code(503); header("Content-Type: application/json");'
            . ' echo "{\"title\": \"busy\"}";');
        $socket = stream_socket_server('tcp://127.0.0.1:0');
        self::$port = (int) explode(':', stream_socket_get_name($socket, false))[1];
        fclose($socket);
        self::$server = proc_open(['php', '-S', '127.0.0.1:' . self::$port, $router], [1 => ['file', '/dev/null', 'w'],
            2 => ['file', '/dev/null', 'w']], $pipes);
        for ($i = 0; $i < 100 && !@fsockopen('127.0.0.1', self::$port); $i++) {
            usleep(50000);
        }
    }

    public static function tearDownAfterClass(): void
    {
        proc_terminate(self::$server);
        proc_close(self::$server);
    }

    private static function client(): Client
    {
        return new Client('http://127.0.0.1:' . self::$port, 'token', ['max_attempts' => 3, 'sleep' => static function (): void {
        }]);
    }

    private static function requests(callable $call): int
    {
        file_put_contents(self::$counter, '');
        try {
            $call();
        } catch (\RuntimeException $answer) {
            // the 503 ends every call: what is counted is how often it was sent
        }
        return strlen((string) file_get_contents(self::$counter));
    }

    public function testAReadIsRetried(): void
    {
        $this->assertSame(3, self::requests(static fn () => self::client()->getJob('j-1')));
    }

    /** @return iterable<string, array{string}> */
    public static function actions(): iterable
    {
        yield 'hold' => ['holdJob'];
        yield 'resume' => ['resumeJob'];
        yield 'cancel' => ['cancelJob'];
    }

    /** @dataProvider actions */
    public function testAnActionThatIsNotRepeatableIsSentOnceAndSaysItMayHaveBeenApplied(string $action): void
    {
        $this->assertSame(1, self::requests(static fn () => self::client()->$action('j-1', 'why')));
        try {
            self::client()->$action('j-1', 'why');
            $this->fail('a 503 must not pass as success');
        } catch (NetworkError $lost) {
            $this->assertStringContainsString('may have been applied', $lost->getMessage());
        }
        $this->assertSame(1, self::requests(static fn () => self::client()->decideRecheckPlan(7, 'why')));
    }
}
