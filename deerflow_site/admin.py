from django.contrib import admin

from deerflow_site.models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """API keys: who has one, when it was last used; secrets are never shown."""

    list_display = ("prefix", "user", "name", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    list_select_related = ("user",)
    search_fields = ("user__username", "name", "prefix")
    readonly_fields = ("prefix", "digest", "created_at", "last_used_at")
    fields = ("user", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    def has_add_permission(self, request) -> bool:
        # Keys are shown once at creation: `manage.py create_api_key USERNAME`.
        return False

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        from django.utils import timezone

        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} key(s).")
