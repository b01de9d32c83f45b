"""The REST API for the PHP core (django-ninja): one module per resource, authentication and error
answers apart, with its clients' token records. It sits beside the console at the top: it calls the
services of the apps below and is imported by nothing but the URL configuration."""
