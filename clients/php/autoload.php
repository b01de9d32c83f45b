<?php

// Without Composer: require this file. With Composer, the "autoload" section of composer.json does it.
spl_autoload_register(static function (string $class): void {
    $prefix = 'Leitstand\\';
    if (strncmp($class, $prefix, strlen($prefix)) === 0) {
        $file = __DIR__ . '/src/' . substr($class, strlen($prefix)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
