from django.urls import path

from evals import views

app_name = "evals"

urlpatterns = [
    path("evaluations/", views.evaluation_list, name="list"),
    path("evaluations/<int:evaluation_id>/", views.evaluation_page, name="detail"),
    path("evaluations/<int:evaluation_id>/live/", views.evaluation_live, name="live"),
    path("evaluations/<int:evaluation_id>/cancel/", views.evaluation_cancel, name="cancel"),
    path(
        "evaluations/<int:evaluation_id>/record.json",
        views.evaluation_record_download,
        name="record",
    ),
    path(
        "evaluations/<int:evaluation_id>/report.html",
        views.evaluation_report,
        name="report",
    ),
    path(
        "evaluations/<int:evaluation_id>/runs/<int:run_id>/",
        views.evaluation_run_page,
        name="run",
    ),
]
