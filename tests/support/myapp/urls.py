"""The team's URLs in front of Leitstand's (the web server's ``ROOT_URLCONF`` when the test settings
are told ``LEITSTAND_TEST_URLCONF``): a view that enqueues a task as a team's own code would."""

from django.http import JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from tests.support.myapp import emails


@csrf_exempt
@require_POST
def welcome(request):
    result = emails.send_welcome.enqueue(request.POST["address"])
    return JsonResponse({"id": result.id, "status": str(result.status)}, status=202)


urlpatterns = [path("myapp/welcome", welcome), path("", include("config.urls"))]
