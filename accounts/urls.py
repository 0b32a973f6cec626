from django.contrib.auth import views as auth_views
from django.urls import path

from accounts import views

app_name = "accounts"

urlpatterns = [
    path("signup/", views.sign_up, name="signup"),
    path("login/", auth_views.LoginView.as_view(template_name="accounts/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("consent/", views.consent, name="consent"),
    path("settings/", views.account_settings, name="settings"),
    path("team/", views.my_team, name="my-team"),
    path("teams/<id:pk>/", views.team_page, name="team"),
    path("invites/<str:token>/", views.invite_join, name="invite"),
]
